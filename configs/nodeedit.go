package configs

import (
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// Finding a token's node in a YAML tree, and copying a tree without one of its
// entries: how optionsDecoder goes on past an option the library refuses.

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
