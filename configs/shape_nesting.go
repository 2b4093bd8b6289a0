package configs

import "strings"

// shapeParser follows what the library's parser makes of the tokens
// (parser/parser.go, parser/token.go): where nodes start, which "-", key or
// "?" each belongs to, and so which lists and mappings are open at each
// point (levels), by the parser's rules, which nest more than YAML does,
// reading a doubtful case as the deeper one.
type shapeParser struct {
	m      *shapeMeter // counts the tokens (nodes) and holds the depth and path lengths to their caps
	levels levels
	// The nodes counted when the latest three nodes started in block context,
	// the column of the latest, and the nodes counted at the latest "-",
	// ":" or "?".
	prevPrevStart, prevStart, lastStart, lastStartCol, lastEntry int
	lastEntryCol                                                 int // of the latest entry if it is a "?"
	// The latest run of tags and anchors: where it starts and the nodes
	// counted at its end.
	prefixCol, prefixLine, prefixEnd int
	prefixCarried                    bool // the run follows another on an earlier line
	prefixElems                      int  // tags and anchors in the run
	prefixLen                        int  // how long they are
	lastStartLen                     int  // how long the latest start's token is
	prefixGroups                     bool // its last one may be grouped with a scalar
	lastStartCarried                 bool // the latest start follows a tag or an anchor on an earlier line
	anchorTok, aliasTok              int  // the nodes counted at the latest "&" and "*"
	strict                           bool // every "-" and key nests from here on
	flowDelim                        int  // the nodes counted at the latest "{", "[" or ","
}

// newShapeParser follows the tokens m counts.
func newShapeParser(m *shapeMeter) shapeParser {
	return shapeParser{m: m, prefixEnd: -2, anchorTok: -2, aliasTok: -2, flowDelim: -3}
}

// token counts a token of the library's at rune index at (plain: a plain
// scalar).
//
// The token after "&" or "*" is the anchor's or alias's name, whatever it is;
// a name that is not a plain scalar makes the parser read on in ways the scan
// does not follow, so it reads the rest strictly: every "-" and key nests.
func (p *shapeParser) token(at int, plain bool) {
	m := p.m
	m.token(at)
	if !plain && (m.nodes-1 == p.anchorTok || m.nodes-1 == p.aliasTok) {
		p.strict = true
	}
}

// push opens a level of kind at column col, at rune index at.
func (p *shapeParser) push(kind levelKind, col, at int) {
	p.m.depth(p.levels.push(kind, col, p.m.nodes), at)
}

// flowStart is a "{" or "[" at column col on line, its token just counted.
func (p *shapeParser) flowStart(kind levelKind, col, line, at int) {
	p.nodeStart(col, line, false, 0)
	p.push(kind, col, at)
	p.flowDelim = p.m.nodes
}

// flowEntry is a ",", its token just counted.
func (p *shapeParser) flowEntry() {
	p.flowDelim = p.m.nodes
	p.levels.popBlock()
}

// flowEnd is a "}" or "]".
func (p *shapeParser) flowEnd() { p.levels.closeFlow() }

// documentStart is a "---": the parser reads each document on its own.
func (p *shapeParser) documentStart() { p.levels.reset() }

// key records the key of l just read, at rune index at, keyLen long: the
// keys leading to a value, as the parser writes its path, may be at most
// MaxKeyPath characters long.
func (p *shapeParser) key(l *level, keyLen, at int) {
	l.keyLen = keyLen
	p.m.keyPath(l.entryPath(), at)
}

// nodeStart records that a node (a scalar, an alias, a flow collection) starts
// on line at column col with the token just counted, if it is in block
// context: the value of the latest "-" or key, or the next key. scalar: the
// node is one the parser groups with a tag or anchor before it on its line.
//
// The parser takes one tag or anchor just before a scalar on its line as part
// of it (a key's column is then its tag's); other tags and anchors, and those
// on an earlier line, take the node, wherever it is, as their value
// (carried).
//
// The token after "&" or "*" is the anchor's or alias's name, whatever it is.
func (p *shapeParser) nodeStart(col, line int, scalar bool, length int) {
	switch nodes := p.m.nodes; {
	case nodes-1 == p.anchorTok:
		p.prefixEnd = nodes // the anchor's name, part of its prefix
		return
	case nodes-1 == p.aliasTok:
		return
	}
	if top := p.levels.top(); top != nil && top.kind.flow() {
		return
	}
	p.lastStartCarried = false
	if p.afterPrefix() {
		if p.prefixLine == line {
			grouped := scalar && p.prefixElems == 1 && p.prefixGroups
			col, p.lastStartCarried = p.prefixCol, p.prefixCarried || !grouped
		} else {
			p.lastStartCarried = true
		}
	}
	p.started(col)
	p.lastStartLen = length
}

// started records a node starting at col with the token just counted.
func (p *shapeParser) started(col int) {
	p.prevPrevStart, p.prevStart, p.lastStart, p.lastStartCol = p.prevStart, p.lastStart, p.m.nodes, col
	p.lastStartLen = 0
}

// prefix records a tag or an anchor just counted at col (groups: the parser
// may group it with a scalar after it). A run of them on one line goes with
// the node after it on that line; both are the value of a run on an earlier
// line just before.
func (p *shapeParser) prefix(col, line int, groups bool, length int) {
	if !p.afterPrefix() || p.prefixLine != line {
		p.prefixCarried = p.afterPrefix()
		p.prefixCol, p.prefixLine, p.prefixElems, p.prefixLen = col, line, 0, 0
	}
	p.prefixLen += length
	p.prefixElems++
	p.prefixGroups = groups
	p.prefixEnd = p.m.nodes
}

// anchor is a "&" at column col on line, its token just counted: an anchor
// names the next node.
func (p *shapeParser) anchor(col, line int) {
	p.prefix(col, line, true, 0)
	p.anchorTok = p.m.nodes
}

// alias is a "*" at column col on line, its token just counted: an alias is
// a node; as a key, "" in paths.
func (p *shapeParser) alias(col, line int) {
	p.nodeStart(col, line, true, 0)
	p.aliasTok = p.m.nodes
}

// tagGroups: the parser groups a tag with a scalar after it on its line
// unless it is one of the library's "!!" tags other than a scalar's.
func tagGroups(tag string) bool {
	switch tag {
	case "!!int", "!!float", "!!null", "!!str", "!!binary", "!!timestamp", "!!bool":
		return true
	}
	return !strings.HasPrefix(tag, "!!")
}

// afterPrefix: the token before the one just counted is a tag or an anchor.
func (p *shapeParser) afterPrefix() bool { return p.prefixEnd == p.m.nodes-1 }

// seqEntry is a "-" at column col (its token just counted). The parser
// continues a list at col with it, nests a new list in a key at col that has
// no value yet ("jobs:\n- a"), and ends a mapping at col whose key has one;
// after a tag or an anchor the list is their value, wherever it is.
func (p *shapeParser) seqEntry(col, at int) {
	p.lastEntry, p.lastEntryCol = p.m.nodes, 0
	if !p.afterPrefix() && !p.strict {
		if l := p.levels.continueAt(col, blockSeq, p.lastStart, p.prevStart); l != nil {
			l.entry = p.m.nodes
			return
		}
	}
	p.started(col) // the list is the value of what holds it
	p.push(blockSeq, col, at)
}

// mapValue is a ":" at column col, its token just counted, at rune index at.
//
// The key is the node started since the latest "-", ":" or "?", if any, or a
// tag or an anchor just before the ":" ("!!str\n: a"). After a "?" and one
// node, this ":" may be the "?"'s own: then it is read as that when that
// nests deeper (the node is left of the "?").
func (p *shapeParser) mapValue(col, at int) {
	own, carried, keyCol, keyLen := p.lastStart > p.lastEntry, false, col, 0
	switch {
	case p.afterPrefix(): // of several, the first may be a node of its own, carrying the key
		own, carried, keyCol, keyLen = false, p.prefixCarried || p.prefixElems > 1, p.prefixCol, p.prefixLen
	case own:
		keyCol, carried, keyLen = p.lastStartCol, p.lastStartCarried, p.lastStartLen
	}
	if p.lastEntryCol > 0 && keyCol <= p.lastEntryCol && !carried && p.prevStart <= p.lastEntry {
		own, carried, keyCol = false, false, p.lastEntryCol
	}
	p.keyEntry(keyCol, at, own, carried, false, keyLen)
}

// keyEntry is a key at column col, made by a ":" or "?" just counted (own:
// the key's node is the latest start; carried: it is the value of a tag or
// anchor on an earlier line; explicit: a "?"). The parser continues a
// mapping at col with it and, unlike YAML, nests a new mapping in a "-" at
// col that has no value yet ("-\nname: a" is a list of one mapping), so that
// keys and "-" in turn at one column nest without end; after a tag or an
// anchor the mapping is their value, wherever it is.
func (p *shapeParser) keyEntry(col, at int, own, carried, explicit bool, keyLen int) {
	last, prev := p.lastStart, p.prevStart // the latest starts before the key
	if own {
		last, prev = p.prevStart, p.prevPrevStart
	}
	p.lastEntry, p.lastEntryCol = p.m.nodes, 0
	if explicit {
		p.lastEntryCol = col
	}
	// A key right after the flow mapping's "{" or "," is its own; one
	// elsewhere ("{a: ? b}", "{a: b: c}") starts a mapping in its value.
	atKey := p.flowDelim == p.m.nodes-1 || !explicit && p.flowDelim == p.m.nodes-2
	if top := p.levels.top(); top != nil && top.kind == flowMap && atKey {
		p.key(top, keyLen, at)
		return
	}
	if !carried && !p.strict {
		if l := p.levels.continueAt(col, blockMap, last, prev); l != nil {
			l.entry, l.explicit = p.m.nodes, explicit
			p.key(l, keyLen, at)
			return
		}
	}
	p.push(blockMap, col, at)
	top := p.levels.top()
	top.explicit = explicit
	p.key(top, keyLen, at)
}
