package configs

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// optionsDecoder decodes one job's options node into a Go value as the YAML
// library does, strictly (an unknown key is an error), but reports every
// problem rather than the first, each at the option at fault with the job's
// name and in an operator's words. What the library gets wrong or cannot do is
// caught here: fractions where a whole number is wanted, values it would panic on.
// This file holds all of it, down to the edits of the node by which decode goes
// on past a refused option (without, find); below it are only positions and the
// shape of a node (document.go) and the words for values (words.go).
type optionsDecoder struct {
	doc *document // for positions: the node's aliases are already expanded
	job string
}

func (dec *optionsDecoder) errorf(pos Pos, format string, args ...any) {
	dec.doc.errorf(pos, dec.job, format, args...)
}

// decode decodes node into a fresh value, reporting every problem. ok is
// false if there was any.
func (dec *optionsDecoder) decode(node ast.Node, fresh func() any, pos Pos) (decoded any, ok bool) {
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
				dec.errorf(tokenPos(dec.doc.file, ye.GetToken(), pos), "options: %s", ye.GetMessage())
				return nil, false
			}
			dec.report(err, ye.GetToken(), removed, path, v)
			node = rest
			continue
		}
		// No position (a failed time.ParseDuration, a custom unmarshaler): find the
		// top-level option that fails on its own.
		culprit, culpritErr := isolate(node, fresh)
		if culprit == nil {
			dec.errorf(pos, "options: %v", err)
			return nil, false
		}
		key, _ := keyText(culprit.Key)
		if s, isStr := culprit.Value.(*ast.StringNode); isStr && strings.HasPrefix(culpritErr.Error(), "time: ") {
			dec.errorf(dec.doc.pos(culprit.Value), "options.%s: %q is not a duration (write e.g. 10s, 5m, 1h30m; units ms, s, m, h)", key, s.Value)
		} else {
			dec.errorf(dec.doc.pos(culprit.Value), "options.%s: %v", key, culpritErr)
		}
		node, _, _ = without(node, culprit.Key.GetToken())
	}
	return nil, false
}

// report words a decode error about one option (the entry mv, found under
// path, holding the error's token tk) for an operator.
func (dec *optionsDecoder) report(err error, tk *token.Token, mv *ast.MappingValueNode, path []string, into any) {
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
		dec.errorf(dec.doc.pos(mv.Key), "%s", msg)
	case errors.As(err, &typeErr):
		dec.errorf(dec.doc.pos(bad), "%s must be %s, not %s", subject, describeType(typeErr.DstType), describe(bad))
	case errors.As(err, &nodeErr):
		dec.errorf(dec.doc.pos(bad), "%s must be %s, not %s", subject, describeNodeType(nodeErr.Expected), describe(bad))
	case errors.As(err, &ye):
		dec.errorf(dec.doc.pos(bad), "%s: %s", subject, ye.GetMessage())
	}
}

// wholeNumbers reports numbers with a fraction written where t has an
// integer: go-yaml v1.19.2 truncates them silently (batch_size: 1.5 decodes as 1).
// ok is false if there was any.
func (dec *optionsDecoder) wholeNumbers(n ast.Node, t reflect.Type, where string) (ok bool) {
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
				ok = dec.wholeNumbers(mv.Value, t, where) && ok
				continue
			}
			key, _ := keyText(mv.Key)
			if f, known := fields[key]; known {
				ok = dec.wholeNumbers(mv.Value, f.Type, where+"."+key) && ok
			}
		}
	case reflect.Map:
		values, _ := mappingValues(n)
		for _, mv := range values {
			key, _ := keyText(mv.Key)
			ok = dec.wholeNumbers(mv.Value, t.Elem(), where+"."+key) && ok
		}
	case reflect.Slice, reflect.Array:
		if seq, isSeq := n.(*ast.SequenceNode); isSeq {
			for _, e := range seq.Values {
				ok = dec.wholeNumbers(e, t.Elem(), where) && ok
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if f, isFloat := n.(*ast.FloatNode); isFloat && f.Value != math.Trunc(f.Value) {
			dec.errorf(dec.doc.pos(n), "%s must be a whole number, not %s", where, f.GetToken().Value)
			return false
		}
	}
	return ok
}

// maxDecodeAttempts bounds the decode-report-remove loop (each round removes one
// key, so a file would need this many bad options to reach it).
const maxDecodeAttempts = 1000

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

// Finding a token's node in a YAML tree, and copying a tree without one of its
// entries: how decode goes on past an option the library refuses.

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

// contains reports whether tk is the token of n or of a node inside it.
func contains(n ast.Node, tk *token.Token) bool { return find(n, tk) != nil }

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
