package configs_test

import (
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	yamlparser "github.com/goccy/go-yaml/parser"
	"github.com/snip/snip-jobs/configs"
)

// libraryBuilds is what the YAML library builds of data: its scanner's
// tokens, and if its parser reads data (parsed), how deep its lists and
// mappings nest and the longest path it gives a node.
func libraryBuilds(data string) (tokens, depth, path int, parsed bool) {
	all := lexer.Tokenize(data)
	tree, err := yamlparser.Parse(all, 0, yamlparser.AllowDuplicateMapKey())
	for i := 0; err == nil && i < len(tree.Docs); i++ {
		ast.Walk(built{deepest: &depth, longest: &path}, tree.Docs[i])
	}
	return len(all), depth, path, err == nil
}

// built visits the library's tree: a mapping, a list and a mapping of one
// pair (outside a mapping, which holds its pairs) are a level each.
type built struct {
	depth            int
	inMapping        bool
	deepest, longest *int
}

func (b built) Visit(n ast.Node) ast.Visitor {
	if n == nil || reflect.ValueOf(n).IsNil() {
		return nil
	}
	_, mapping := n.(*ast.MappingNode)
	_, seq := n.(*ast.SequenceNode)
	if _, pair := n.(*ast.MappingValueNode); mapping || seq || pair && !b.inMapping {
		b.depth++
	}
	*b.deepest, *b.longest, b.inMapping = max(*b.deepest, b.depth), max(*b.longest, len(n.GetPath())), mapping
	return b
}

// checkCountsAtLeast fails t if the guard counts less nesting or a shorter
// path in data than the YAML library builds, or fewer than half as many
// words and indicators as the library's tokens (which it counts after).
func checkCountsAtLeast(t *testing.T, data string) {
	t.Helper()
	tokens, depth, path, parsed := libraryBuilds(data)
	if words, gDepth, gPath := configs.GuardCounts([]byte(data)); 2*words < tokens || parsed && (gDepth < depth || gPath < path) {
		t.Errorf("%q: the guard counts %d words, nesting %d deep, a path of %d; the library builds %d tokens, %d, %d",
			data, words, gDepth, gPath, tokens, depth, path)
	}
}

// yamlish is text made of YAML's pieces, at random: lines with indentation,
// "- ", "? ", keys, plain, quoted and block scalars, flow collections,
// anchors, tags, comments, tabs and stray indicators.
func yamlish(r *rand.Rand, lines int) string {
	pieces := []string{"- ", "- ", "? ", "a: ", "key: ", "b:", "<<: ", "&x ", "*x ", "!t ", "!!str ",
		"[", "]", "{", "}", ", ", "a", "b c", "'q [ { #'", `"d \" [ \t x"`, "'", `"`, "|", "|-", ">2", ">",
		" # c [ {", "#", "\t", ":", "-", "?", "---", "...", "%Y", "@", "`", "é", "\\", "http://x", "a:b", " "}
	var b strings.Builder
	for range lines {
		b.WriteString(strings.Repeat(" ", r.Intn(7)))
		for range r.Intn(5) {
			b.WriteString(pieces[r.Intn(len(pieces))])
		}
		b.WriteString([]string{"\n", "\n", "\n\n", "\r\n"}[r.Intn(4)])
	}
	return b.String()
}

// The guard counts at least what the library builds, on every YAML file of
// the repository (and refuses none) and on random text of YAML's pieces.
// SNIP_GUARD_RUNS=200000 runs more; FuzzGuard explores.
func TestTheGuardCountsAtLeastWhatTheYAMLLibraryBuilds(t *testing.T) {
	files := 0
	filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if ext := filepath.Ext(path); err == nil && d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		} else if err != nil || ext != ".yaml" && ext != ".yml" {
			return nil
		} else if data, err := os.ReadFile(path); err == nil && utf8.Valid(data) {
			files++
			checkCountsAtLeast(t, string(data))
			if e := configs.Guard(data); e != nil {
				t.Errorf("%s: %v", path, e)
			}
		}
		return nil
	})
	if files == 0 {
		t.Error("no YAML file found in the repository")
	}
	runs := 5000
	if n, err := strconv.Atoi(os.Getenv("SNIP_GUARD_RUNS")); err == nil {
		runs = n
	}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < runs && !t.Failed(); i++ {
		checkCountsAtLeast(t, yamlish(r, 1+r.Intn(12)))
	}
}

// FuzzGuard holds the guard to the library on any text:
//
//	go test ./configs -run '^$' -fuzz FuzzGuard -fuzztime 10m
func FuzzGuard(f *testing.F) {
	r := rand.New(rand.NewSource(2))
	for range 20 {
		f.Add(yamlish(r, 8))
	}
	f.Fuzz(func(t *testing.T, data string) {
		if utf8.ValidString(data) && len(data) <= 4096 {
			checkCountsAtLeast(t, data)
		}
	})
}
