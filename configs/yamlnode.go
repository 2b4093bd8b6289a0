package configs

import (
	"fmt"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// parser holds the state of one Parse call: the file, the problems found so far
// and the YAML anchors, which are resolved here rather than by the YAML library so
// that every value keeps its own position.
type parser struct {
	file  string
	data  []byte
	types Types
	problems
	// aliases maps each alias to the value of the anchor it names (the nearest
	// one before it, as YAML says). An alias with no anchor before it is absent.
	aliases map[*ast.AliasNode]ast.Node
	// aliasNodes counts the nodes that aliases and merge keys have produced,
	// up to MaxAliasNodes; outer is the alias (or merge key's value) whose
	// expansion is in progress, outermost first, where crossing the limit is
	// reported; overBudget is set once it has been.
	aliasNodes int
	outer      ast.Node
	overBudget bool
	// backendPos is where leadership.backend's value is written (zero when
	// it is not).
	backendPos Pos
}

// enter makes n the expansion in progress if there is none, and returns the
// function that ends it.
func (p *parser) enter(n ast.Node) (leave func()) {
	if p.outer != nil {
		return func() {}
	}
	p.outer = n
	return func() { p.outer = nil }
}

// spend counts n nodes produced by the expansion in progress. ok is false once
// they have crossed MaxAliasNodes: the caller then produces nothing more.
// problem is set only by the call that crosses it, and is to be reported (with
// the job's name): it names the outermost alias.
func (p *parser) spend(n int) (ok bool, problem *Error) {
	if p.overBudget {
		return false, nil
	}
	p.aliasNodes += n
	if p.aliasNodes <= MaxAliasNodes {
		return true, nil
	}
	p.overBudget = true
	what := "this merge key (<<)"
	if a, isAlias := p.outer.(*ast.AliasNode); isAlias {
		what = "alias *" + aliasName(a)
	}
	return false, &Error{Pos: p.pos(p.outer), Msg: fmt.Sprintf("%s would expand to more than %d YAML nodes, the limit for a config file "+
		"(anchors that repeat other anchors multiply: write the values out, or share fewer levels)", what, MaxAliasNodes)}
}

// pos is where n starts. For a block mapping that is its first key (the library's
// token for it is the first ':').
func (p *parser) pos(n ast.Node) Pos {
	switch v := n.(type) {
	case nil:
		return Pos{File: p.file}
	case *ast.MappingNode:
		if !v.IsFlowStyle && len(v.Values) > 0 {
			return p.pos(v.Values[0].Key)
		}
	case *ast.MappingValueNode:
		return p.pos(v.Key)
	case *ast.DocumentNode:
		if v.Body == nil { // its GetToken would dereference the nil body
			return Pos{File: p.file, Line: 1, Col: 1}
		}
		return p.pos(v.Body)
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return Pos{File: p.file}
	}
	return Pos{File: p.file, Line: tk.Position.Line, Col: tk.Position.Column}
}

// linkAliases walks the tree in document order and records, for every alias, the
// value of the nearest anchor of that name before it. An anchor is recorded after
// its own value is walked, so an alias inside the value it would name stays
// unresolved and no cycle can form.
func (p *parser) linkAliases(n ast.Node, anchors map[string]ast.Node) {
	switch v := n.(type) {
	case *ast.DocumentNode:
		p.linkAliases(v.Body, anchors)
	case *ast.MappingNode:
		for _, mv := range v.Values {
			p.linkAliases(mv, anchors)
		}
	case *ast.MappingValueNode:
		p.linkAliases(v.Key, anchors)
		p.linkAliases(v.Value, anchors)
	case *ast.MappingKeyNode:
		p.linkAliases(v.Value, anchors)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			p.linkAliases(e, anchors)
		}
	case *ast.TagNode:
		p.linkAliases(v.Value, anchors)
	case *ast.AnchorNode:
		p.linkAliases(v.Value, anchors)
		anchors[anchorName(v)] = v.Value
	case *ast.AliasNode:
		if target, ok := anchors[aliasName(v)]; ok {
			p.aliases[v] = target
		}
	}
}

func anchorName(n *ast.AnchorNode) string {
	if n.Name == nil {
		return ""
	}
	return n.Name.GetToken().Value
}

func aliasName(n *ast.AliasNode) string {
	if n.Value == nil {
		return ""
	}
	return n.Value.GetToken().Value
}

// resolve looks through anchors and aliases to the value they stand for. An alias
// naming no earlier anchor is reported (with job) and resolves to nil.
func (p *parser) resolve(n ast.Node, job string) ast.Node {
	for {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			target, ok := p.aliases[v]
			if !ok {
				p.errorf(p.pos(v), job, "alias *%s: no anchor &%s is defined before it", aliasName(v), aliasName(v))
				return nil
			}
			n = target
		default:
			return n
		}
	}
}

// isNull reports whether n is absent or an explicit or empty YAML null.
func isNull(n ast.Node) bool {
	if n == nil {
		return true
	}
	_, ok := n.(*ast.NullNode)
	return ok
}

// describe names the kind of a YAML value for "must be a ..." messages.
func describe(n ast.Node) string {
	switch n.(type) {
	case nil, *ast.NullNode:
		return "nothing"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.TagNode:
		return "a tagged value"
	}
	return "a string"
}

// entry is one key of a mapping: its own, or one brought in by a merge key (<<).
type entry struct {
	keyPos Pos
	value  ast.Node // as written: may be an anchor or alias
}

// mapping reads the keys of one YAML mapping. Every key it is asked for is marked
// used; finish reports the rest as unknown, along with duplicate keys.
type mapping struct {
	p *parser
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
func (p *parser) mapping(n ast.Node, where, job string) *mapping {
	m := &mapping{p: p, where: where, job: job, pos: p.pos(n), entries: map[string]entry{}, used: map[string]bool{}}
	m.at = m.pos
	n = p.resolve(n, job)
	if isNull(n) {
		return m
	}
	values, ok := mappingValues(n)
	if !ok {
		p.errorf(p.pos(n), job, "%s must be a mapping of keys to values, not %s", m.label(), describe(n))
		return m
	}
	m.pos = p.pos(n)
	m.at = m.pos
	m.add(values, true)
	return m
}

// mappingValues returns the entries of a mapping node.
func mappingValues(n ast.Node) ([]*ast.MappingValueNode, bool) {
	switch v := n.(type) {
	case *ast.MappingNode:
		return v.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{v}, true
	}
	return nil, false
}

// add records the mapping's own entries (own = true), reporting duplicates and
// keys that are not strings, then the entries of its merge keys, which never
// override a key already present.
func (m *mapping) add(values []*ast.MappingValueNode, own bool) {
	p := m.p
	var merges []*ast.MappingValueNode
	for _, mv := range values {
		if mv.Key.IsMergeKey() {
			merges = append(merges, mv)
			continue
		}
		keyPos := p.pos(mv.Key)
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
		src := p.resolve(mv.Value, m.job)
		var sources []ast.Node
		if seq, ok := src.(*ast.SequenceNode); ok {
			for _, e := range seq.Values {
				sources = append(sources, p.resolve(e, m.job))
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
				m.keyProblems = append(m.keyProblems, &Error{Pos: p.pos(mv.Value), Msg: "a merge key (<<) must be followed by a mapping, an alias of one, or a list of those"})
				continue
			}
			leave := p.enter(mv.Value)
			more, problem := p.spend(len(vals))
			if problem != nil {
				m.keyProblems = append(m.keyProblems, problem)
			}
			if more {
				m.add(vals, false)
			}
			leave()
			if !more {
				return
			}
		}
	}
}

// keyText returns a scalar key as written.
func keyText(k ast.MapKeyNode) (string, bool) {
	switch v := k.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.NullNode:
		return v.GetToken().Value, true
	}
	return "", false
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
	return ok && !isNull(m.p.resolveQuiet(e.value))
}

// resolveQuiet resolves without reporting an unresolved alias (the read that
// uses the value reports it).
func (p *parser) resolveQuiet(n ast.Node) ast.Node {
	for {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			n = p.aliases[v]
		default:
			return n
		}
	}
}

// get returns the value of key (looking through anchors and aliases) and marks
// the key used. ok is false when the key is absent or null.
func (m *mapping) get(key string) (e entry, value ast.Node, ok bool) {
	m.used[key] = true
	e, ok = m.entries[key]
	if !ok {
		return e, nil, false
	}
	value = m.p.resolve(e.value, m.job)
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
		if v := m.p.resolveQuiet(e.value); v != nil && !isNull(v) {
			return m.p.pos(v)
		}
		return e.keyPos
	}
	return m.at
}

func (m *mapping) errorf(pos Pos, format string, args ...any) {
	m.p.errorf(pos, m.job, format, args...)
}

// str reads a string. Numbers are taken as written (`user: 1000`).
func (m *mapping) str(key string) (string, bool) {
	_, v, ok := m.get(key)
	if !ok {
		return "", false
	}
	s, ok := scalarText(v)
	if !ok {
		m.errorf(m.p.pos(v), "%s must be a string, not %s", m.path(key), describe(v))
		return "", false
	}
	return s, true
}

// scalarText returns a string or number as written; a `!!str` tag is honoured.
func scalarText(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		return strings.TrimRight(v.Value.Value, "\n"), true
	case *ast.IntegerNode, *ast.FloatNode:
		return v.GetToken().Value, true
	case *ast.TagNode:
		if v.Start != nil && v.Start.Value == "!!str" {
			if s, ok := scalarText(v.Value); ok {
				return s, true
			}
			if b, ok := v.Value.(*ast.BoolNode); ok {
				return b.GetToken().Value, true
			}
		}
	}
	return "", false
}

// boolean reads true or false.
func (m *mapping) boolean(key string) (val, ok bool) {
	_, v, ok := m.get(key)
	if !ok {
		return false, false
	}
	b, isBool := v.(*ast.BoolNode)
	if !isBool {
		m.errorf(m.p.pos(v), "%s must be true or false, not %s", m.path(key), describe(v))
		return false, false
	}
	return b.Value, true
}

// durationRule says which durations a setting accepts.
type durationRule int

const (
	// zeroOrPositive: 0 is allowed (meaning "default" or "off").
	zeroOrPositive durationRule = iota
	// positive: 0 is not allowed.
	positive
)

// duration reads a Go duration ("90s", "1h30m"); a bare 0 is also accepted.
// Negative durations are errors. ok is false when the key is absent or bad.
func (m *mapping) duration(key string, rule durationRule) (time.Duration, bool) {
	_, v, ok := m.get(key)
	if !ok {
		return 0, false
	}
	pos := m.p.pos(v)
	var d time.Duration
	switch n := v.(type) {
	case *ast.IntegerNode:
		if n.GetToken().Value != "0" {
			m.errorf(pos, "%s: %s needs a unit, e.g. %ss or %sm", m.path(key), n.GetToken().Value, n.GetToken().Value, n.GetToken().Value)
			return 0, false
		}
	case *ast.StringNode:
		var err error
		d, err = time.ParseDuration(strings.TrimSpace(n.Value))
		if err != nil {
			m.errorf(pos, "%s: %q is not a duration (write e.g. 10s, 5m, 1h30m; units ms, s, m, h)", m.path(key), n.Value)
			return 0, false
		}
	default:
		m.errorf(pos, "%s must be a duration such as 10s or 5m, not %s", m.path(key), describe(v))
		return 0, false
	}
	switch {
	case d < 0:
		m.errorf(pos, "%s must not be negative (got %s)", m.path(key), fmtDuration(d))
		return 0, false
	case d == 0 && rule == positive:
		m.errorf(pos, "%s must be more than 0", m.path(key))
		return 0, false
	}
	return d, true
}

// item is a string read from a list, with where it is written.
type item struct {
	s   string
	pos Pos
}

// strings reads a list of strings. ok is false when the key is absent or any item
// is bad.
func (m *mapping) strings(key string) (items []item, ok bool) {
	_, v, ok := m.get(key)
	if !ok {
		return nil, false
	}
	seq, isSeq := v.(*ast.SequenceNode)
	if !isSeq {
		m.errorf(m.p.pos(v), "%s must be a list, not %s", m.path(key), describe(v))
		return nil, false
	}
	ok = true
	for _, e := range seq.Values {
		e = m.p.resolve(e, m.job)
		s, isStr := scalarText(e)
		if !isStr {
			m.errorf(m.p.pos(e), "%s: each item must be a string, not %s", m.path(key), describe(e))
			ok = false
			continue
		}
		items = append(items, item{s: s, pos: m.p.pos(e)})
	}
	return items, ok
}

// sub starts reading the mapping under key. Its at is where key is written (the
// parent's at when key is absent): problems with the section as a whole are
// reported there.
func (m *mapping) sub(key string) *mapping {
	_, v, _ := m.get(key)
	s := m.p.mapping(v, m.path(key), m.job)
	s.at = m.keyPos(key)
	return s
}

// finish reports duplicate keys and every key that was not read.
func (m *mapping) finish() {
	for _, e := range m.keyProblems {
		e.Job = m.job
		m.p.add(e)
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

// suggest returns the known key closest to key if it is a likely typo.
func suggest(key string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if k == key {
			continue
		}
		if d := editDistance(key, k); d < bestDist || (d == bestDist && k < best) {
			best, bestDist = k, d
		}
	}
	if bestDist > 2 || bestDist >= len(key) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// fmtDuration prints a duration without trailing zero units: 1h, 1h30m, 90s → 1m30s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
