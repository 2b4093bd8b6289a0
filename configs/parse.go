package configs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	yamlparser "github.com/goccy/go-yaml/parser"
)

// Load reads and parses the configuration file at path. A file that cannot be read
// gives an error naming path (errors.Is(err, fs.ErrNotExist) for a missing one);
// problems in the file give Errors.
func Load(path string, types Types) (*File, error) {
	data, err := readFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: config file not found: %w", path, err)
		}
		return nil, fmt.Errorf("%s: cannot read config file: %w", path, err)
	}
	return Parse(path, data, types)
}

// readFile reads at most MaxFileSize bytes past a byte order mark, and one
// more: enough for Parse to say where the file crosses the limit without
// reading a huge file into memory.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, int64(len(utf8BOM)+MaxFileSize+1)))
}

// Parse checks the configuration in data, read from filename (used in positions),
// and returns it with every default filled in. If anything is wrong it returns a
// nil File and Errors listing every problem found, sorted by position.
//
// The file must be UTF-8 (a leading byte order mark is allowed) and at most
// MaxFileSize bytes; its aliases and merge keys may produce at most
// MaxAliasNodes nodes.
func Parse(filename string, data []byte, types Types) (*File, error) {
	f, _, err := parseCounting(filename, data, types)
	return f, err
}

// parseCounting is Parse, also returning how many nodes aliases and merge keys
// produced (for tests).
func parseCounting(filename string, data []byte, types Types) (*File, int, error) {
	data, textErr := checkText(filename, data)
	if textErr != nil {
		return nil, 0, Errors{textErr}
	}
	p := &parser{document: newDocument(filename, &problems{}), types: types}
	f := p.parse(data)
	if len(p.errs) > 0 {
		sortErrors(p.errs)
		return nil, p.budget.spent, dedupe(p.errs)
	}
	return f, p.budget.spent, nil
}

// parser holds the state of one Parse call: the file's YAML document and the
// job types.
type parser struct {
	*document
	types Types
}

func (p *parser) parse(data []byte) *File {
	// Duplicate keys are found by the checks below, which report them all and go
	// on; the library's own check stops at the first.
	tree, err := yamlparser.ParseBytes(data, 0, yamlparser.AllowDuplicateMapKey())
	if err != nil {
		p.syntaxError(err)
		return nil
	}
	var body ast.Node
	for i, doc := range tree.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if i > 0 && body != nil {
			p.errorf(p.pos(doc.Body), "", "only one YAML document is allowed in the file (this one follows a ---)")
			continue
		}
		body = doc.Body
		p.link(doc, map[string]ast.Node{})
	}

	top := p.mapping(body, "", "")
	f := &File{Path: p.file}
	f.Instance = readInstance(top)
	var backendPos Pos
	f.Leadership, backendPos = readLeadership(top.sub("leadership"))
	if f.Leadership.Backend != BackendEtcd && top.has("etcd") {
		top.errorf(top.keyPos("etcd"), "etcd applies only to leadership.backend: etcd, and this file's is %s (line %d): remove this section",
			f.Leadership.Backend, backendPos.Line)
	}
	f.Etcd = readEtcd(top.sub("etcd"))
	f.Kubernetes = readKubernetes(top, f.Leadership.Backend, backendPos)
	f.Postgres = readPostgres(top.sub("postgres"))
	f.HTTP = readHTTP(top.sub("http"))
	f.Log = readLog(top.sub("log"))
	f.ShutdownTimeout = DefaultShutdownTimeout
	if d, ok := top.duration("shutdown_timeout", zeroOrPositive); ok && d > 0 {
		f.ShutdownTimeout = d
	}
	jobs := &jobReader{doc: p.document, types: jobTypes{p.types}, names: map[string]Pos{}}
	f.Jobs = jobs.list(top)
	if f.Leadership.Backend == BackendKubernetes {
		checkLeaseNames(top, f)
	}
	top.finish()
	return f
}

// syntaxHints add advice to the YAML library's messages that puzzle people.
var syntaxHints = []struct{ contains, hint string }{
	{"'\t' that cannot start any token", "indent with spaces, not tabs"},
	{"'@' is a reserved character", `quote values that start with @, e.g. cron: "@weekly"`},
	{"'`' is a reserved character", "quote values that start with `"},
}

func (p *parser) syntaxError(err error) {
	var ye yaml.Error
	if !errors.As(err, &ye) {
		p.errorf(Pos{File: p.file}, "", "YAML syntax error: %v", err)
		return
	}
	pos := Pos{File: p.file}
	if tk := ye.GetToken(); tk != nil && tk.Position != nil {
		pos.Line, pos.Col = tk.Position.Line, tk.Position.Column
	}
	msg := ye.GetMessage()
	for _, h := range syntaxHints {
		if strings.Contains(msg, h.contains) {
			msg += " (" + h.hint + ")"
		}
	}
	p.errorf(pos, "", "YAML syntax error: %s", msg)
}
