package configs

import (
	"fmt"

	"github.com/goccy/go-yaml/ast"
)

// entry is one key of a mapping: its own, or one brought in by a merge key (<<).
type entry struct {
	keyPos Pos
	value  ast.Node // as written: may be an anchor or alias
}

// mapping reads the keys of one YAML mapping, each as the typed value it must be
// (mapvalues.go), reporting a bad value at its own position with the job's name.
// Nothing is silently ignored: every key it is asked for is marked used, and
// finish reports the rest as unknown, along with duplicate keys and keys that
// are not strings. Merge keys (<<) bring in keys the mapping lacks.
type mapping struct {
	doc *document
	// where names the mapping in messages about its keys ("etcd.tls"); "" for the
	// top level and for a job (whose name the job field gives).
	where   string
	job     string
	pos     Pos // where the mapping starts
	at      Pos // where the key naming it is written (pos for the top level and jobs)
	entries map[string]entry
	order   []string
	used    map[string]bool
	// problems found while reading the keys, reported by finish once the job's
	// name is known.
	keyProblems []*Error
}

// mapping starts reading n (an anchor or alias is looked through; null is an
// empty mapping). A value that is not a mapping is reported and read as empty.
func (d *document) mapping(n ast.Node, where, job string) *mapping {
	m := &mapping{doc: d, where: where, job: job, pos: d.pos(n), entries: map[string]entry{}, used: map[string]bool{}}
	m.at = m.pos
	n = d.resolve(n, job)
	if isNull(n) {
		return m
	}
	values, ok := mappingValues(n)
	if !ok {
		d.errorf(d.pos(n), job, "%s must be a mapping of keys to values, not %s", m.label(), describe(n))
		return m
	}
	m.pos = d.pos(n)
	m.at = m.pos
	m.add(values, true)
	return m
}

// add records the mapping's own entries (own = true), reporting duplicates and
// keys that are not strings, then the entries of its merge keys, which never
// override a key already present.
func (m *mapping) add(values []*ast.MappingValueNode, own bool) {
	var merges []*ast.MappingValueNode
	for _, mv := range values {
		if mv.Key.IsMergeKey() {
			merges = append(merges, mv)
			continue
		}
		keyPos := m.doc.pos(mv.Key)
		key, ok := keyText(mv.Key)
		if !ok {
			if own {
				m.keyProblems = append(m.keyProblems, &Error{Pos: keyPos, Msg: fmt.Sprintf("%s: keys must be plain strings", m.label())})
			}
			continue
		}
		if first, dup := m.entries[key]; dup {
			if own {
				m.keyProblems = append(m.keyProblems, &Error{Pos: keyPos, Msg: fmt.Sprintf("duplicate key %q (first at line %d)", m.path(key), first.keyPos.Line)})
			}
			continue
		}
		m.entries[key] = entry{keyPos: keyPos, value: mv.Value}
		m.order = append(m.order, key)
	}
	for _, mv := range merges {
		if !m.merge(mv) {
			return
		}
	}
}

// merge adds the entries of the mappings a merge key names (one, or a list of
// them), counting them against the alias budget. more is false once the budget
// is spent: nothing more is to be merged.
func (m *mapping) merge(mv *ast.MappingValueNode) (more bool) {
	d := m.doc
	src := d.resolve(mv.Value, m.job)
	var sources []ast.Node
	if seq, ok := src.(*ast.SequenceNode); ok {
		for _, e := range seq.Values {
			sources = append(sources, d.resolve(e, m.job))
		}
	} else {
		sources = []ast.Node{src}
	}
	for _, s := range sources {
		if s == nil { // an alias naming no anchor: already reported
			continue
		}
		vals, ok := mappingValues(s)
		if !ok {
			m.keyProblems = append(m.keyProblems, &Error{Pos: d.pos(mv.Value), Msg: "a merge key (<<) must be followed by a mapping, an alias of one, or a list of those"})
			continue
		}
		leave := d.budget.enter(mv.Value)
		more, problem := d.budget.spend(len(vals))
		if problem != nil {
			m.keyProblems = append(m.keyProblems, problem)
		}
		if more {
			m.add(vals, false)
		}
		leave()
		if !more {
			return false
		}
	}
	return true
}

// label names the mapping in a message.
func (m *mapping) label() string {
	switch {
	case m.where != "":
		return m.where
	case m.job != "":
		return "the job"
	}
	return "the configuration"
}

// path names a key in a message: "etcd.tls.ca", or just "every" in a job.
func (m *mapping) path(key string) string {
	if m.where == "" {
		return key
	}
	return m.where + "." + key
}

// has reports whether key is present with a non-null value, without using it.
func (m *mapping) has(key string) bool {
	e, ok := m.entries[key]
	return ok && !isNull(m.doc.resolveQuiet(e.value))
}

// get returns the value of key (looking through anchors and aliases) and marks
// the key used. ok is false when the key is absent or null.
func (m *mapping) get(key string) (e entry, value ast.Node, ok bool) {
	m.used[key] = true
	e, ok = m.entries[key]
	if !ok {
		return e, nil, false
	}
	value = m.doc.resolve(e.value, m.job)
	if isNull(value) {
		return e, nil, false
	}
	return e, value, true
}

// keyPos is where key is written, or where the mapping is if key is absent.
func (m *mapping) keyPos(key string) Pos {
	if e, ok := m.entries[key]; ok {
		return e.keyPos
	}
	return m.at
}

// valuePos is where key's value is written.
func (m *mapping) valuePos(key string) Pos {
	if e, ok := m.entries[key]; ok {
		if v := m.doc.resolveQuiet(e.value); v != nil && !isNull(v) {
			return m.doc.pos(v)
		}
		return e.keyPos
	}
	return m.at
}

// notePath records where the value of key, a path (a file, a directory), is
// written (File.SettingPos).
func (m *mapping) notePath(key string) {
	if m.doc.files == nil {
		m.doc.files = map[string]Pos{}
	}
	m.doc.files[m.path(key)] = m.valuePos(key)
}

// errorf reports a problem in this mapping, with its job's name.
func (m *mapping) errorf(pos Pos, format string, args ...any) {
	m.doc.errorf(pos, m.job, format, args...)
}

// sub starts reading the mapping under key. Its at is where key is written (the
// parent's at when key is absent): problems with the section as a whole are
// reported there.
func (m *mapping) sub(key string) *mapping {
	_, v, _ := m.get(key)
	s := m.doc.mapping(v, m.path(key), m.job)
	s.at = m.keyPos(key)
	return s
}

// finish reports duplicate keys and every key that was not read.
func (m *mapping) finish() {
	for _, e := range m.keyProblems {
		e.Job = m.job
		m.doc.add(e)
	}
	m.keyProblems = nil
	for _, key := range m.order {
		if m.used[key] {
			continue
		}
		msg := fmt.Sprintf("unknown key %q", key)
		if m.where != "" {
			msg += " in " + m.where
		}
		if s := suggest(key, m.known()); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		m.errorf(m.entries[key].keyPos, "%s", msg)
	}
}

// known lists the keys that were asked for.
func (m *mapping) known() []string {
	ks := make([]string, 0, len(m.used))
	for k := range m.used {
		ks = append(ks, k)
	}
	return ks
}
