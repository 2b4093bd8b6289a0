package configs

import (
	"fmt"

	"github.com/goccy/go-yaml/ast"
)

// document is one file's YAML tree as the readers of this package see it: every
// node's position in the file, and anchors and aliases resolved here rather than
// by the YAML library, so that a value reached through an alias keeps the
// position where it is written. An alias resolves only to an anchor written
// before it, so no cycle can form; what aliases produce is bounded by budget.
// Problems are added to the file's problems, with the job they are in. The
// shape of a node, which every reader asks about, is here too (nodePos, isNull,
// mappingValues, keyText): it needs no document.
type document struct {
	file string
	*problems
	// aliases maps each alias to the value of the anchor it names (the nearest
	// one before it, as YAML says). An alias with no anchor before it is absent.
	aliases map[*ast.AliasNode]ast.Node
	budget  aliasBudget
	// files maps each setting naming a file to where its value is written
	// (File.SettingPos), as the readers find them (mapping.notePath); nil
	// while there is none.
	files map[string]Pos
}

// newDocument is a document of file with no anchors yet (link records them).
func newDocument(file string, ps *problems) *document {
	return &document{file: file, problems: ps, aliases: map[*ast.AliasNode]ast.Node{}, budget: aliasBudget{file: file}}
}

// pos is where n starts.
func (d *document) pos(n ast.Node) Pos { return nodePos(d.file, n) }

// nodePos is where n starts in file. For a block mapping that is its first key
// (the library's token for it is the first ':').
func nodePos(file string, n ast.Node) Pos {
	switch v := n.(type) {
	case nil:
		return Pos{File: file}
	case *ast.MappingNode:
		if !v.IsFlowStyle && len(v.Values) > 0 {
			return nodePos(file, v.Values[0].Key)
		}
	case *ast.MappingValueNode:
		return nodePos(file, v.Key)
	case *ast.DocumentNode:
		if v.Body == nil { // its GetToken would dereference the nil body
			return Pos{File: file, Line: 1, Col: 1}
		}
		return nodePos(file, v.Body)
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return Pos{File: file}
	}
	return Pos{File: file, Line: tk.Position.Line, Col: tk.Position.Column}
}

// isNull reports whether n is absent or an explicit or empty YAML null.
func isNull(n ast.Node) bool {
	if n == nil {
		return true
	}
	_, ok := n.(*ast.NullNode)
	return ok
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

// link walks the tree in document order and records, for every alias, the
// value of the nearest anchor of that name before it. An anchor is recorded after
// its own value is walked, so an alias inside the value it would name stays
// unresolved and no cycle can form.
func (d *document) link(n ast.Node, anchors map[string]ast.Node) {
	switch v := n.(type) {
	case *ast.DocumentNode:
		d.link(v.Body, anchors)
	case *ast.MappingNode:
		for _, mv := range v.Values {
			d.link(mv, anchors)
		}
	case *ast.MappingValueNode:
		d.link(v.Key, anchors)
		d.link(v.Value, anchors)
	case *ast.MappingKeyNode:
		d.link(v.Value, anchors)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			d.link(e, anchors)
		}
	case *ast.TagNode:
		d.link(v.Value, anchors)
	case *ast.AnchorNode:
		d.link(v.Value, anchors)
		anchors[anchorName(v)] = v.Value
	case *ast.AliasNode:
		if target, ok := anchors[aliasName(v)]; ok {
			d.aliases[v] = target
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
func (d *document) resolve(n ast.Node, job string) ast.Node {
	for {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			target, ok := d.aliases[v]
			if !ok {
				d.errorf(d.pos(v), job, "alias *%s: no anchor &%s is defined before it", aliasName(v), aliasName(v))
				return nil
			}
			n = target
		default:
			return n
		}
	}
}

// resolveQuiet resolves without reporting an unresolved alias (the read that
// uses the value reports it).
func (d *document) resolveQuiet(n ast.Node) ast.Node {
	for {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.AliasNode:
			n = d.aliases[v]
		default:
			return n
		}
	}
}

// entryValuePos is where the value of key is written among the entries of the
// mapping n, or fallback if key is not one of them (a key brought in by a
// merge key, say).
func (d *document) entryValuePos(n ast.Node, key string, fallback Pos) Pos {
	values, _ := mappingValues(n)
	for _, mv := range values {
		if k, ok := keyText(mv.Key); ok && k == key {
			if v := d.resolveQuiet(mv.Value); v != nil {
				return d.pos(v)
			}
			return d.pos(mv.Key)
		}
	}
	return fallback
}

// aliasBudget counts the nodes that aliases and merge keys produce in one file,
// so that expanding them costs at most MaxAliasNodes nodes however they nest.
// Crossing the limit is reported once, at the outermost alias (or merge key)
// whose expansion crossed it; past it, nothing more is produced.
type aliasBudget struct {
	file string
	// spent counts the nodes produced, up to MaxAliasNodes (and the one
	// crossing it); outer is the alias (or merge key's value) whose expansion is
	// in progress, outermost first, where crossing the limit is reported; over
	// is set once it has been.
	spent int
	outer ast.Node
	over  bool
}

// enter makes n the expansion in progress if there is none, and returns the
// function that ends it.
func (b *aliasBudget) enter(n ast.Node) (leave func()) {
	if b.outer != nil {
		return func() {}
	}
	b.outer = n
	return func() { b.outer = nil }
}

// spend counts n nodes produced by the expansion in progress. ok is false once
// they have crossed MaxAliasNodes: the caller then produces nothing more.
// problem is set only by the call that crosses it, and is to be reported (with
// the job's name): it names the outermost alias.
func (b *aliasBudget) spend(n int) (ok bool, problem *Error) {
	if b.over {
		return false, nil
	}
	b.spent += n
	if b.spent <= MaxAliasNodes {
		return true, nil
	}
	b.over = true
	what := "this merge key (<<)"
	if a, isAlias := b.outer.(*ast.AliasNode); isAlias {
		what = "alias *" + aliasName(a)
	}
	return false, &Error{Pos: nodePos(b.file, b.outer), Msg: fmt.Sprintf("%s would expand to more than %d YAML nodes, the limit for a config file "+
		"(anchors that repeat other anchors multiply: write the values out, or share fewer levels)", what, MaxAliasNodes)}
}

// expand returns n with anchors dropped and aliases replaced by the values they
// name, so that the YAML library can decode a subtree without the rest of the file
// (its own alias handling needs the anchors it has decoded itself). Containers are
// copied; n is unchanged.
//
// Nodes produced through an alias count against MaxAliasNodes; past it, an
// alias expands to null (the problem is reported once).
func (d *document) expand(n ast.Node, job string) ast.Node {
	if d.budget.outer != nil {
		ok, problem := d.budget.spend(1)
		if problem != nil {
			problem.Job = job
			d.add(problem)
		}
		if !ok {
			return ast.Null(d.budget.outer.GetToken())
		}
	}
	switch v := n.(type) {
	case *ast.AnchorNode:
		return d.expand(v.Value, job)
	case *ast.AliasNode:
		target := d.resolve(v, job)
		if target == nil {
			return ast.Null(v.GetToken())
		}
		defer d.budget.enter(v)()
		return d.expand(target, job)
	case *ast.MappingNode:
		c := *v
		c.Values = make([]*ast.MappingValueNode, len(v.Values))
		for i, mv := range v.Values {
			mvc := *mv
			mvc.Value = d.expand(mv.Value, job)
			c.Values[i] = &mvc
		}
		return &c
	case *ast.MappingValueNode:
		c := *v
		c.Value = d.expand(v.Value, job)
		return &c
	case *ast.SequenceNode:
		c := *v
		c.Values = make([]ast.Node, len(v.Values))
		for i, e := range v.Values {
			c.Values[i] = d.expand(e, job)
		}
		return &c
	case *ast.TagNode:
		c := *v
		c.Value = d.expand(v.Value, job)
		return &c
	}
	return n
}

// checkDuplicates reports duplicate keys anywhere under n (written as where).
func (d *document) checkDuplicates(n ast.Node, where, job string) {
	switch v := n.(type) {
	case *ast.AnchorNode:
		d.checkDuplicates(v.Value, where, job)
	case *ast.TagNode:
		d.checkDuplicates(v.Value, where, job)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			d.checkDuplicates(e, where, job)
		}
	case *ast.MappingValueNode:
		d.checkDuplicates(&ast.MappingNode{BaseNode: v.BaseNode, Start: v.Start, Values: []*ast.MappingValueNode{v}}, where, job)
	case *ast.MappingNode:
		first := map[string]Pos{}
		for _, mv := range v.Values {
			if mv.Key.IsMergeKey() {
				continue
			}
			key, ok := keyText(mv.Key)
			if !ok {
				continue
			}
			kp := d.pos(mv.Key)
			if f, dup := first[key]; dup {
				d.errorf(kp, job, "duplicate key %q (first at line %d)", where+"."+key, f.Line)
			} else {
				first[key] = kp
			}
			d.checkDuplicates(mv.Value, where+"."+key, job)
		}
	}
}
