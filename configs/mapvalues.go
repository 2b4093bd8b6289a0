package configs

import (
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// The typed reads of a mapping's values. Each marks its key used; a value of the
// wrong kind is reported at the value and read as absent (ok false).

// str reads a string. Numbers are taken as written (`user: 1000`).
func (m *mapping) str(key string) (string, bool) {
	_, v, ok := m.get(key)
	if !ok {
		return "", false
	}
	s, ok := scalarText(v)
	if !ok {
		m.errorf(m.doc.pos(v), "%s must be a string, not %s", m.path(key), describe(v))
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
		m.errorf(m.doc.pos(v), "%s must be true or false, not %s", m.path(key), describe(v))
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
	pos := m.doc.pos(v)
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
		m.errorf(m.doc.pos(v), "%s must be a list, not %s", m.path(key), describe(v))
		return nil, false
	}
	ok = true
	for _, e := range seq.Values {
		e = m.doc.resolve(e, m.job)
		s, isStr := scalarText(e)
		if !isStr {
			m.errorf(m.doc.pos(e), "%s: each item must be a string, not %s", m.path(key), describe(e))
			ok = false
			continue
		}
		items = append(items, item{s: s, pos: m.doc.pos(e)})
	}
	return items, ok
}
