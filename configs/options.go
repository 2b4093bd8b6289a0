package configs

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// options reads the job's options: kept as the positioned node the job's type
// decodes (OptionsType), which Parse calls here so that every problem is
// reported with the rest of the file's.
func (p *parser) options(m *mapping, j Job, typeKnown bool) Options {
	e, node, present := m.get("options")
	o := Options{job: j.Name, pos: j.Pos}
	if !typeKnown {
		return o
	}
	check, _ := p.types.Options(j.Type)
	if check == nil {
		if present {
			m.errorf(e.keyPos, "job type %q takes no options", j.Type)
		}
		return o
	}
	if present {
		o.pos = p.pos(node)
		if _, isMap := mappingValues(node); !isMap {
			m.errorf(o.pos, "options must be a mapping of option names to values, not %s", describe(node))
			return o
		}
		p.checkDuplicates(e.value, "options", m.job)
		o.node = p.expand(e.value, m.job)
	}
	j.Options = o
	checked, err := check(j)
	if err != nil {
		var errs Errors
		if errors.As(err, &errs) {
			p.add(errs...)
		} else {
			m.errorf(o.pos, "options: %v", err)
		}
		return o
	}
	o.checked = checked
	return o
}

// OptionError is a problem a job type's Validate finds with one option: Parse
// reports it at that option's value rather than at options:.
type OptionError struct {
	Key string // the option's key, as written in the file
	Err error
}

func (e *OptionError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// optionPos is where the value of the option key is written in the options
// mapping node, or fallback (a key brought in by a merge key, say).
func (p *parser) optionPos(node ast.Node, key string, fallback Pos) Pos {
	values, _ := mappingValues(node)
	for _, mv := range values {
		if k, ok := keyText(mv.Key); ok && k == key {
			if v := p.resolveQuiet(mv.Value); v != nil {
				return p.pos(v)
			}
			return p.pos(mv.Key)
		}
	}
	return fallback
}

// checkWholeNumbers reports numbers with a fraction written where t has an
// integer: go-yaml v1.19.2 truncates them silently (batch_size: 1.5 decodes as 1).
// ok is false if there was any.
func (p *parser) checkWholeNumbers(m *mapping, n ast.Node, t reflect.Type, where string) (ok bool) {
	ok = true
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		fields := fieldsByKey(t)
		values, _ := mappingValues(n)
		for _, mv := range values {
			if mv.Key.IsMergeKey() {
				ok = p.checkWholeNumbers(m, mv.Value, t, where) && ok
				continue
			}
			key, _ := keyText(mv.Key)
			if f, known := fields[key]; known {
				ok = p.checkWholeNumbers(m, mv.Value, f.Type, where+"."+key) && ok
			}
		}
	case reflect.Map:
		values, _ := mappingValues(n)
		for _, mv := range values {
			key, _ := keyText(mv.Key)
			ok = p.checkWholeNumbers(m, mv.Value, t.Elem(), where+"."+key) && ok
		}
	case reflect.Slice, reflect.Array:
		if seq, isSeq := n.(*ast.SequenceNode); isSeq {
			for _, e := range seq.Values {
				ok = p.checkWholeNumbers(m, e, t.Elem(), where) && ok
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if f, isFloat := n.(*ast.FloatNode); isFloat && f.Value != math.Trunc(f.Value) {
			m.errorf(p.pos(n), "%s must be a whole number, not %s", where, f.GetToken().Value)
			return false
		}
	}
	return ok
}

// fieldsByKey maps the keys of a struct to its fields, by the YAML library's rule
// (the yaml tag's name, else the field name in lower case).
func fieldsByKey(t reflect.Type) map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		fields[name] = f
	}
	return fields
}

// maxDecodeAttempts bounds the decode-report-remove loop (each round removes one
// key, so a file would need this many bad options to reach it).
const maxDecodeAttempts = 1000

// decodeOptions decodes node into a fresh value, reporting every problem. ok is
// false if there was any.
func (p *parser) decodeOptions(m *mapping, node ast.Node, fresh func() any, pos Pos) (decoded any, ok bool) {
	ok = true
	for range maxDecodeAttempts {
		v := fresh()
		err := decodeStrict(node, v)
		if err == nil {
			return v, ok
		}
		ok = false
		var ye yaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil {
			rest, removed, path := without(node, ye.GetToken())
			if removed == nil {
				m.errorf(tokenPos(p.file, ye.GetToken(), pos), "options: %s", ye.GetMessage())
				return nil, false
			}
			p.reportOption(m, err, ye.GetToken(), removed, path, v)
			node = rest
			continue
		}
		// No position (a failed time.ParseDuration, a custom unmarshaler): find the
		// top-level option that fails on its own.
		culprit, culpritErr := isolate(node, fresh)
		if culprit == nil {
			m.errorf(pos, "options: %v", err)
			return nil, false
		}
		key, _ := keyText(culprit.Key)
		if s, isStr := culprit.Value.(*ast.StringNode); isStr && strings.HasPrefix(culpritErr.Error(), "time: ") {
			m.errorf(p.pos(culprit.Value), "options.%s: %q is not a duration (write e.g. 10s, 5m, 1h30m; units ms, s, m, h)", key, s.Value)
		} else {
			m.errorf(p.pos(culprit.Value), "options.%s: %v", key, culpritErr)
		}
		node, _, _ = without(node, culprit.Key.GetToken())
	}
	return nil, false
}

// decodeStrict decodes node into into, rejecting unknown keys. Duplicate keys are
// let through: checkDuplicates reports them, with the job's name.
func decodeStrict(node ast.Node, into any) (err error) {
	defer func() {
		// go-yaml v1.19.2 panics on some values, e.g. a !!binary-tagged scalar
		// where a list is expected (TagNode.ArrayRange returns nil, decodeSlice
		// calls Len on it): a bad config file must not crash validate.
		if r := recover(); r != nil {
			err = fmt.Errorf("this value cannot be decoded (go-yaml: %v)", r)
		}
	}()
	return yaml.NodeToValue(node, into, yaml.Strict(), yaml.AllowDuplicateMapKey())
}

// isolate returns the first entry of the mapping node that fails to decode on its
// own, and its error.
func isolate(node ast.Node, fresh func() any) (*ast.MappingValueNode, error) {
	values, _ := mappingValues(node)
	for _, mv := range values {
		one := &ast.MappingNode{BaseNode: &ast.BaseNode{}, Start: mv.GetToken(), Values: []*ast.MappingValueNode{mv}}
		if err := decodeStrict(one, fresh()); err != nil {
			return mv, err
		}
	}
	return nil, nil
}

func tokenPos(file string, tk *token.Token, fallback Pos) Pos {
	if tk == nil || tk.Position == nil {
		return fallback
	}
	return Pos{File: file, Line: tk.Position.Line, Col: tk.Position.Column}
}

// reportOption words a decode error about one option (the entry mv, found under
// path, holding the error's token tk) for an operator.
func (p *parser) reportOption(m *mapping, err error, tk *token.Token, mv *ast.MappingValueNode, path []string, into any) {
	key, _ := keyText(mv.Key)
	where := strings.Join(append([]string{"options"}, path...), ".")
	// The value at fault: mv's value, or an item inside it.
	bad := find(mv.Value, tk)
	if bad == nil {
		bad = mv.Value
	}
	subject := fmt.Sprintf("%s.%s", where, key)
	if bad != mv.Value {
		subject += ": an item"
	}
	var unknown *yaml.UnknownFieldError
	var typeErr *yaml.TypeError
	var nodeErr *yaml.UnexpectedNodeTypeError
	var ye yaml.Error
	switch {
	case errors.As(err, &unknown):
		msg := fmt.Sprintf("unknown key %q in %s", key, where)
		if len(path) == 0 {
			if s := suggest(key, optionKeys(into)); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
		}
		m.errorf(p.pos(mv.Key), "%s", msg)
	case errors.As(err, &typeErr):
		m.errorf(p.pos(bad), "%s must be %s, not %s", subject, describeType(typeErr.DstType), describe(bad))
	case errors.As(err, &nodeErr):
		m.errorf(p.pos(bad), "%s must be %s, not %s", subject, describeNodeType(nodeErr.Expected), describe(bad))
	case errors.As(err, &ye):
		m.errorf(p.pos(bad), "%s: %s", subject, ye.GetMessage())
	}
}

// find returns the node under n (n included) whose token is tk.
func find(n ast.Node, tk *token.Token) ast.Node {
	if n == nil {
		return nil
	}
	if n.GetToken() == tk {
		return n
	}
	switch v := n.(type) {
	case *ast.MappingNode:
		for _, mv := range v.Values {
			if f := find(mv, tk); f != nil {
				return f
			}
		}
	case *ast.MappingValueNode:
		if f := find(v.Key, tk); f != nil {
			return f
		}
		return find(v.Value, tk)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			if f := find(e, tk); f != nil {
				return f
			}
		}
	case *ast.TagNode:
		return find(v.Value, tk)
	case *ast.AnchorNode:
		return find(v.Value, tk)
	}
	return nil
}

// describeNodeType names a YAML node type in an operator's words.
func describeNodeType(t ast.NodeType) string {
	switch t {
	case ast.MappingType:
		return "a mapping"
	case ast.SequenceType:
		return "a list"
	}
	return "a " + t.YAMLName()
}

// describeType names a Go type in an operator's words.
func describeType(t reflect.Type) string {
	if t == nil {
		return "another kind of value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[time.Duration]() {
		return "a duration such as 10s or 5m"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "a " + t.String()
}

// optionKeys lists the keys an options struct takes; used for suggestions.
func optionKeys(v any) []string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	return slices.Collect(maps.Keys(fieldsByKey(t)))
}

// without returns n without the mapping entry that tk belongs to (the innermost
// one whose key is tk or whose value contains it), copying only the containers on
// the way so that n itself is unchanged. path is the keys leading to the entry's
// mapping. removed is nil if no entry holds tk.
func without(n ast.Node, tk *token.Token) (rest ast.Node, removed *ast.MappingValueNode, path []string) {
	switch v := n.(type) {
	case *ast.MappingNode:
		for i, mv := range v.Values {
			if mv.Key.GetToken() == tk {
				return withValues(v, i, nil), mv, nil
			}
			if !contains(mv.Value, tk) {
				continue
			}
			if inner, rm, sub := without(mv.Value, tk); rm != nil {
				c := *mv
				c.Value = inner
				key, _ := keyText(mv.Key)
				return withValues(v, i, &c), rm, append([]string{key}, sub...)
			}
			return withValues(v, i, nil), mv, nil
		}
	case *ast.MappingValueNode:
		m := &ast.MappingNode{BaseNode: v.BaseNode, Start: v.Start, Values: []*ast.MappingValueNode{v}}
		return without(m, tk)
	case *ast.SequenceNode:
		for i, e := range v.Values {
			if !contains(e, tk) {
				continue
			}
			if inner, rm, sub := without(e, tk); rm != nil {
				c := *v
				c.Values = append([]ast.Node(nil), v.Values...)
				c.Values[i] = inner
				return &c, rm, sub
			}
		}
	case *ast.TagNode:
		if inner, rm, sub := without(v.Value, tk); rm != nil {
			c := *v
			c.Value = inner
			return &c, rm, sub
		}
	}
	return n, nil, nil
}

// withValues copies m with entry i replaced by mv, or removed if mv is nil.
func withValues(m *ast.MappingNode, i int, mv *ast.MappingValueNode) *ast.MappingNode {
	c := *m
	c.Values = append([]*ast.MappingValueNode(nil), m.Values[:i]...)
	if mv != nil {
		c.Values = append(c.Values, mv)
	}
	c.Values = append(c.Values, m.Values[i+1:]...)
	return &c
}

// contains reports whether tk is the token of n or of a node inside it.
func contains(n ast.Node, tk *token.Token) bool { return find(n, tk) != nil }
