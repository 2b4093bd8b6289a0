package configs_test

import (
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	yamlparser "github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
	"github.com/snip/snip-jobs/configs"
)

// librarySays is what the YAML library makes of data: its scanner's tokens,
// how deep its flow brackets nest in a document, and, when it parses data, how deep the
// lists and mappings of its tree nest.
func librarySays(data string) (tokens, flowDepth, treeDepth int) {
	tks := lexer.Tokenize(data)
	depth := 0
	for _, tk := range tks {
		switch tk.Type {
		case token.SequenceStartType, token.MappingStartType:
			depth++
			flowDepth = max(flowDepth, depth)
		case token.SequenceEndType, token.MappingEndType:
			depth--
		case token.DocumentHeaderType: // the parser reads each document on its own
			depth = 0
		}
	}
	if tree, err := yamlparser.ParseBytes([]byte(data), 0, yamlparser.AllowDuplicateMapKey()); err == nil {
		for _, d := range tree.Docs {
			treeDepth = max(treeDepth, nesting(d))
		}
	}
	return len(tks), flowDepth, treeDepth
}

// nesting is how deep lists and mappings nest in n.
func nesting(n ast.Node) int {
	switch v := n.(type) {
	case *ast.DocumentNode:
		return nesting(v.Body)
	case *ast.MappingNode:
		d := 0
		for _, mv := range v.Values {
			d = max(d, nesting(mv.Key), nesting(mv.Value))
		}
		return 1 + d
	case *ast.MappingValueNode: // a mapping of one pair
		return 1 + max(nesting(v.Key), nesting(v.Value))
	case *ast.SequenceNode:
		d := 0
		for _, e := range v.Values {
			d = max(d, nesting(e))
		}
		return 1 + d
	case *ast.MappingKeyNode:
		return nesting(v.Value)
	case *ast.TagNode:
		return nesting(v.Value)
	case *ast.AnchorNode:
		return nesting(v.Value)
	}
	return 0
}

// checkReadAsTheLibraryDoes fails t unless the shape scan of data makes the
// same tokens as the library's scanner (so it skips exactly what the library
// skips as quoted, block scalar or comment) and finds lists and mappings
// nested at least as deep as the library does.
func checkReadAsTheLibraryDoes(t *testing.T, data string) {
	t.Helper()
	depth, _, tokens := configs.ShapeOf([]byte(data))
	libTokens, flowDepth, treeDepth := librarySays(data)
	if tokens != libTokens || depth < flowDepth || depth < treeDepth {
		t.Errorf("%q: the scan finds %d tokens, nesting %d deep; the library %d tokens, brackets %d deep, its tree %d deep",
			data, tokens, depth, libTokens, flowDepth, treeDepth)
	}
}

// yamlish is text made of what YAML is made of, at random: lines with
// indentation, "- ", "? ", keys, plain, quoted and block scalars, flow
// collections, anchors, tags, comments, tabs and stray indicators.
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
		switch r.Intn(8) {
		case 0:
			b.WriteString("\r\n")
		case 1:
			b.WriteString("\n\n")
		default:
			b.WriteString("\n")
		}
	}
	return b.String()
}

// randomRunes is short text of YAML's indicators, at random.
func randomRunes(r *rand.Rand, n int) string {
	alphabet := []rune("[]{},:-?|>#'\"!&*%@` \t\n\r.<ab0\\x+2é  \n\n")
	b := make([]rune, 1+r.Intn(n))
	for i := range b {
		b[i] = alphabet[r.Intn(len(alphabet))]
	}
	return string(b)
}

// The shape scan follows the library's scanner: on every YAML file of the
// repository and on a few thousand random texts of YAML's pieces, it
// makes the library's tokens and finds the library's nesting or deeper.
// SNIP_SHAPE_RUNS=200000 runs more (a minute or so); FuzzShape explores.
func TestTheShapeScanReadsTheFileAsTheYAMLLibraryDoes(t *testing.T) {
	files := 0
	filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(path); err != nil || ext != ".yaml" && ext != ".yml" {
			return nil
		}
		if data, err := os.ReadFile(path); err == nil && utf8.Valid(data) {
			files++
			checkReadAsTheLibraryDoes(t, string(data))
		}
		return nil
	})
	if files == 0 {
		t.Error("no YAML file found in the repository")
	}
	runs := 3000
	if n, err := strconv.Atoi(os.Getenv("SNIP_SHAPE_RUNS")); err == nil {
		runs = n
	}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < runs && !t.Failed(); i++ {
		checkReadAsTheLibraryDoes(t, yamlish(r, 1+r.Intn(12)))
		checkReadAsTheLibraryDoes(t, randomRunes(r, 40))
	}
}

// FuzzShape holds the shape scan to the library's scanner on any text:
//
//	go test ./configs -run '^$' -fuzz FuzzShape -fuzztime 10m
func FuzzShape(f *testing.F) {
	example, err := os.ReadFile("snip-jobs.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(example))
	r := rand.New(rand.NewSource(2))
	for range 20 {
		f.Add(yamlish(r, 8))
	}
	// What the library does that YAML does not, and what the fuzzer found.
	for _, s := range []string{
		strings.Repeat("k:\n-\n", 5),        // nests at one column
		strings.Repeat("- !t\n", 5) + "- x", // a tag takes the next node
		"k: !t\nk: !t\nk: x",
		"- &a\n- &a\nk: &a\nk: x",
		"- - - - a\n  - b\n",
		"* 0:\n-",                                   // the alias's name is the token after "*"
		"!!str \n   :\n  }|- b:\n",                  // a lone tag is the key
		" ? \n\n  ''\n    a: \n",                    // a "?", its key, then another key
		"    a: \n     ? # c\n ---a: \n      b: \n", // the "?"'s ":" left of it
		"  !t http://x@@\n- b:\n   - - ---? \n",
		"!\n!0 0:\n 0:",          // a tag and its key on a line, taken by a tag before
		"? \n!! 0:",              // "!!" alone is the "?"'s key; "0" a key of its value
		"*!  :\n 0:",             // an alias named by a tag (grouped with ":")
		"0: !\n!0 ! :",           // tags as the key, taken by a tag before
		"? \n!! ! ! :",           // "!!" is the "?"'s key, "! !" a key of its value
		"{0:{0:? 0[]}}",          // a "?" in a flow mapping's value starts a mapping
		" 0:\n  ? 0\n 0:\n - 0:", // a "?", its key, and a key of the mapping around
		"{a: b: c, d: {e: f: {g: h}}}",
		"|\t\n   \n#",
		"a: |\n  [[[\n b: [",
		"a: \"x\n  [[\"\nb: [[",
		"a: b\n  \"c\nd: [[[\"",
		"a: b\n  -x: \"\ny: [[[\"",
		"{a: {b: [c, {d: e}]}}",
		"x: !t [a, &y {b: *y}]",
		"a: \"\t\t\tb\"\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if !utf8.ValidString(data) || len(data) > 4096 {
			return
		}
		checkReadAsTheLibraryDoes(t, data)
	})
}

// Anchors, tags and merge keys written as configs write them nest no deeper
// than the lists and mappings around them, however many there are.
func TestAnchorsAndTagsInAConfigAddNoNesting(t *testing.T) {
	var b strings.Builder
	b.WriteString("x-defaults:\n  - &m0 {grace: 5s}\n")
	for i := range 200 {
		fmt.Fprintf(&b, "&k%d key%d: &v%d !t value\n", i, i, i)
		fmt.Fprintf(&b, "list%d: !!str &l%d\n  - *v%d\n  - <<: *m0\n    name: !!str x\n", i, i, i)
	}
	data := b.String()
	if depth, _, _ := configs.ShapeOf([]byte(data)); depth > 3 {
		t.Errorf("the scan finds nesting %d deep, want 3", depth)
	}
	checkReadAsTheLibraryDoes(t, data)
}
