package configs

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	yamlparser "github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/snip/snip-jobs/internal/boundedfile"
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
// reading a huge file into memory. A file that is not a regular file (a
// named pipe, a device) is refused unopened: it could block the reader, or
// feed it without end.
func readFile(path string) ([]byte, error) {
	data, err := boundedfile.Read(path, int64(len(utf8BOM)+MaxFileSize), boundedfile.Regular)
	if errors.Is(err, boundedfile.ErrTooLarge) {
		return data, nil // Parse says where it crosses the limit
	}
	return data, err
}

// Parse checks the configuration in data, read from filename (used in positions),
// and returns it with every default filled in. If anything is wrong it returns a
// nil File and Errors listing every problem found, sorted by position.
//
// The file must be UTF-8 (a leading byte order mark is allowed) and at most
// MaxFileSize bytes, its lists and mappings may nest at most MaxDepth deep
// and it may hold at most MaxNodes YAML nodes; its aliases and merge keys may
// produce at most MaxAliasNodes nodes.
func Parse(filename string, data []byte, types Types) (*File, error) {
	f, _, err := parseCounting(filename, data, types)
	return f, err
}

// parseCounting is Parse, also returning how many nodes aliases and merge keys
// produced (for tests).
//
// A file is read one way, each step adding to the same problems (errors.go):
// checkText (text.go) → checkGuard (guard.go: nesting, size and cost, before the
// YAML library reads anything) → readDocument: the YAML library's tree as a document
// (document.go: positions, anchors, the alias budget) → readConfig: mappings
// (mapping.go, mapvalues.go) read section by section (sections.go, etcd.go,
// kubernetes.go) and the jobs (jobs.go, schedule.go; each job's options checked
// by its type, through optionsDecoder in optdecode.go) → a File, or Errors.
func parseCounting(filename string, data []byte, types Types) (*File, int, error) {
	data, textErr := checkText(filename, data)
	if textErr != nil {
		return nil, 0, Errors{textErr}
	}
	tokens, guardErr := checkGuard(filename, data)
	if guardErr != nil {
		return nil, 0, Errors{guardErr}
	}
	ps := &problems{}
	doc, body, ok := readDocument(filename, tokens, ps)
	var f *File
	if ok {
		f = readConfig(doc.mapping(body, "", ""), types)
	}
	if len(ps.errs) > 0 {
		sortErrors(ps.errs)
		return nil, doc.budget.spent, dedupe(ps.errs)
	}
	return f, doc.budget.spent, nil
}

// readDocument parses tokens (the guard's) into a document of file, whose
// body is the one YAML document they hold (nil if it is empty), with its
// anchors linked. ok is false on a syntax error: there is no tree to read.
func readDocument(file string, tokens token.Tokens, ps *problems) (doc *document, body ast.Node, ok bool) {
	doc = newDocument(file, ps)
	// Duplicate keys are found by the readers, which report them all and go on;
	// the library's own check stops at the first.
	tree, err := yamlparser.Parse(tokens, 0, yamlparser.AllowDuplicateMapKey())
	if err != nil {
		syntaxError(doc, err)
		return doc, nil, false
	}
	for i, d := range tree.Docs {
		if d == nil || d.Body == nil {
			continue
		}
		if i > 0 && body != nil {
			doc.errorf(doc.pos(d.Body), "", "only one YAML document is allowed in the file (this one follows a ---)")
			continue
		}
		body = d.Body
		doc.link(d, map[string]ast.Node{})
	}
	return doc, body, true
}

// readConfig reads the top-level mapping into a File, section by section, and
// checks what spans sections (which backend the etcd and kubernetes sections
// apply to, the Lease names of the instance and the jobs).
func readConfig(top *mapping, types Types) *File {
	f := &File{Path: top.doc.file}
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
	jobs := &jobReader{doc: top.doc, types: jobTypes{types}, names: map[string]Pos{}}
	f.Jobs = jobs.list(top)
	if f.Leadership.Backend == BackendKubernetes {
		checkLeaseNames(top, f)
	}
	top.finish()
	f.settings = top.doc.files
	return f
}

// syntaxHints add advice to the YAML library's messages that puzzle people.
var syntaxHints = []struct{ contains, hint string }{
	{"'\t' that cannot start any token", "indent with spaces, not tabs"},
	{"'@' is a reserved character", `quote values that start with @, e.g. cron: "@weekly"`},
	{"'`' is a reserved character", "quote values that start with `"},
}

// syntaxError reports the YAML library's refusal of the file, at its position.
func syntaxError(doc *document, err error) {
	var ye yaml.Error
	if !errors.As(err, &ye) {
		doc.errorf(Pos{File: doc.file}, "", "YAML syntax error: %v", err)
		return
	}
	pos := Pos{File: doc.file}
	if tk := ye.GetToken(); tk != nil && tk.Position != nil {
		pos.Line, pos.Col = tk.Position.Line, tk.Position.Column
	}
	msg := ye.GetMessage()
	for _, h := range syntaxHints {
		if strings.Contains(msg, h.contains) {
			msg += " (" + h.hint + ")"
		}
	}
	doc.errorf(pos, "", "YAML syntax error: %s", msg)
}
