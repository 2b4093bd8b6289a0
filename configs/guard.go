package configs

import (
	"bytes"
	"fmt"
	"strings"
)

// The YAML library (goccy/go-yaml) has no option that bounds what it builds:
// its parser gives every node the path of keys and indices that leads to it,
// so that nesting costs the square of its depth (20,000 levels of "[" in a
// 40 KB file ran the process out of memory) and a long key its length times
// the values below it; its scanner reads a run of "<" again at each of its
// characters and the rest of the line at each tab in double-quoted text.
//
// checkGuard reads the text once before the library, by a few rules, and
// refuses it at the first place that crosses a limit. Where the rules are in
// doubt they count more than the library builds, never less:
//
//   - nodes: every indicator ("-", "?", ":", ",", a bracket, "---", "...",
//     "%") and every scalar and tag counts one, an anchor or alias two (the
//     "&" or "*" and its name), a block scalar three (its header, its text
//     and the empty one the library may add);
//   - depth: the lists and mappings open, a stack. A "[" or "{" opens one
//     until its bracket closes; a "-" or key in a block opens one unless it
//     continues the list or mapping of its kind at its column (a "-" or key
//     left of a block's column ends it), the parser's way: at one column, a
//     "-" after a key with no value yet, or a key after a "-" with none,
//     nests; after a tag or anchor the node is theirs, wherever it is; in a
//     flow collection any "-" or key but its own opens one;
//   - the path: each open level adds its key, with a "." and room for
//     quotes, or an index ("[9999]");
//   - steps: each "<" costs the rest of its run and each tab the rest of its
//     line, wherever they are.
//
// What is text and what is structure follows the library's scanner: quoted
// scalars, comments, block scalars (to the first line that starts at or left
// of the column of the key or "-" before them, or of their first line) and
// plain scalars, which the next line continues if it starts right of that
// column, and the library's quirks that decide it (a merge key takes in the
// plain text before it, tabs take no column but in block text, a "-" after a
// plain scalar's line starts folded text). Unlike the shape scan it replaced,
// it need not make the library's tokens, only at least as many.
// TestTheGuardCountsAtLeastWhatTheYAMLLibraryBuilds and FuzzGuard hold it to
// the library; after upgrading goccy/go-yaml, run FuzzGuard for a while.
func checkGuard(file string, text []byte) *Error {
	g := readGuarded(text, guardLimits{MaxDepth, MaxNodes, MaxKeyPath})
	at, msg := g.errAt, g.errMsg
	if c := costlyAt(text); c >= 0 && (msg == "" || c < at) {
		at, msg = c, fmt.Sprintf(tooManySteps, MaxScanSteps)
	}
	if msg == "" {
		return nil
	}
	return &Error{Pos: offsetPos(file, text, at), Msg: msg}
}

// What the guard says where a file crosses a limit (%d: the limit).
const (
	tooManyNodes = "the file has more than %d YAML nodes by here (each key, value, \"-\", \":\", \",\" and bracket counts), " +
		"the limit for a config file (a real one has a few hundred)"
	tooManySteps = "the YAML library would take more than %d steps to read the file by here, the limit for a config file: " +
		`runs of "<", and tabs in double-quoted text (write \t), cost it the square of their length`
	tooDeep    = "lists and mappings nest more than %d deep here, the limit for a config file (a real one nests about 5 deep)"
	tooLongKey = "the keys leading here, this one included, are more than %d characters long together, the limit for a config file " +
		"(the YAML library copies them into every value below)"
)

// costlyAt is the byte offset where the library's scanner would cross
// MaxScanSteps, or -1.
func costlyAt(text []byte) int {
	steps, eol, run := 0, -1, 0
	for i, c := range text {
		if i > eol {
			eol = i + bytes.IndexAny(text[i:], "\r\n")
			if eol < i {
				eol = len(text)
			}
		}
		switch c {
		case '\t':
			steps += eol - i
		case '<':
			if run == 0 {
				run = len(text) - i - len(bytes.TrimLeft(text[i:], "<"))
			}
			steps += run
			run--
		}
		if steps > MaxScanSteps {
			return i
		}
	}
	return -1
}

type guardLimits struct{ depth, nodes, path int }

type levelKind uint8

const (
	blockSeq levelKind = iota
	blockMap
	flowSeq
	flowMap
)

// level is a list or mapping open at a point of the file.
type level struct {
	kind  levelKind
	col   int // a block one's column: its "-"'s or first key's
	at    int // a flow one's bracket (a byte offset)
	entry int // the nodes started by its latest "-" or key
	base  int // how long the parser's path of the level is
	key   int // how long its latest key is
}

func (l *level) path() int {
	if l.kind == blockSeq || l.kind == flowSeq {
		return l.base + len("[9999]")
	}
	return l.base + len(".''") + max(l.key, len("null"))
}

// guard reads a file's text; see checkGuard.
type guard struct {
	text      []byte
	lim       guardLimits
	i         int  // the byte it is at
	line, col int  // its line and column (in characters)
	bol       bool // only blanks since the line began
	indented  bool // the line began with a blank
	inBlock   bool // in block text
	directive bool // a "%" on an unindented line began a directive: words are tokens
	nodes     int
	starts    int // nodes that began a key or value
	open      []level
	maxDepth  int
	maxPath   int
	// The library's scanner state: the flow collections it counts open, and
	// the column of its latest key or "-" (lastDelimColumn).
	flowSeqs, flowMaps, lastDelim int
	afterFlowDelim                int // nodes counted at the latest "[", "{" or ","
	// The latest node started: its column (its tag's or anchor's if the
	// parser groups them), its own column and offset, whether it is a plain
	// or quoted scalar, whether it is the value of a tag or anchor (carried),
	// whether a "-", ":" or "?" came since (it is then no key).
	nodeCol, ownCol, nodeAt, nodeLine        int // nodeAt: the first of the nodes on its line since the latest entry
	explicitAt, explicitLevel                int // the latest "?" and its level, if no "-" or key came since (else -1)
	nodeText, nodeCarried, nodeFresh, strict bool
	// The tags and anchors read since the latest node: how many, where the
	// first is, and whether the parser may group the last with a scalar.
	prefixes, prefixLine, prefixCol int
	prefixGroups                    bool
	nodePrefixes                    int  // those the latest node took
	plainOpen                       bool // a plain scalar ended the line: the next may continue it
	errAt                           int
	errMsg                          string
}

func readGuarded(text []byte, lim guardLimits) *guard {
	g := &guard{text: text, lim: lim, line: 1, col: 1, bol: true, afterFlowDelim: -3, maxPath: len("$"), explicitAt: -1}
	defer g.endExplicit()
	for g.i < len(text) && g.errMsg == "" {
		c := text[g.i]
		if c == ' ' || c == '\t' || isBreak(c) {
			g.adv()
			continue
		}
		if g.bol && g.lineStart(c) {
			continue
		}
		g.token(c)
	}
	return g
}

func isBreak(c byte) bool { return c == '\n' || c == '\r' }
func isBlank(c byte) bool { return c == ' ' || c == '\t' || isBreak(c) }

// blankAt: the byte k after the current one is a blank or past the end.
func (g *guard) blankAt(k int) bool { return g.i+k >= len(g.text) || isBlank(g.text[g.i+k]) }

// peek is the byte k after the current one, 0 past the end.
func (g *guard) peek(k int) byte {
	if g.i+k < len(g.text) {
		return g.text[g.i+k]
	}
	return 0
}

// adv moves to the next byte.
func (g *guard) adv() {
	c := g.text[g.i]
	g.i++
	switch {
	case c == '\r' && g.peek(0) == '\n':
	case isBreak(c):
		g.line, g.col, g.bol, g.indented, g.directive = g.line+1, 1, true, false, false
	default:
		g.indented = g.indented || g.bol && (c == ' ' || c == '\t')
		g.bol = g.bol && (c == ' ' || c == '\t')
		// The library's columns leave out a tab right of its latest key's or
		// "-"'s column, but in block text.
		if (c != '\t' || g.inBlock || g.col <= g.lastDelim) && g.i < len(g.text) && g.text[g.i]&0xc0 != 0x80 {
			g.col++
		}
	}
}

func (g *guard) skipLine() {
	for g.i < len(g.text) && !isBreak(g.text[g.i]) {
		g.adv()
	}
}

func (g *guard) fail(format string, limit int) {
	if g.errMsg == "" {
		g.errAt, g.errMsg = g.i, fmt.Sprintf(format, limit)
	}
}

func (g *guard) count() {
	if g.nodes++; g.nodes > g.lim.nodes {
		g.fail(tooManyNodes, g.lim.nodes)
	}
}

func (g *guard) flowing() bool { return g.flowSeqs > 0 || g.flowMaps > 0 }

// flowStop: c ends a plain scalar or a name in a flow collection.
func (g *guard) flowStop(c byte) bool {
	switch c {
	case ',', '[', '{':
		return g.flowing()
	case ']':
		return g.flowSeqs > 0
	case '}':
		return g.flowMaps > 0
	}
	return false
}

// lineStart reads what only the start of a line can be (a document marker, a
// directive, a plain scalar's continuation); false: a token starts here.
func (g *guard) lineStart(c byte) bool {
	open := g.plainOpen
	g.plainOpen = false
	rest, first := g.text[g.i:], g.i == 0 || isBreak(g.text[g.i-1]) // no indentation at all
	switch {
	case first && (bytes.HasPrefix(rest, []byte("---")) && g.blankAt(3)):
		g.count()
		g.endExplicit()
		g.open, g.lastDelim = g.open[:0], 0 // the parser reads each document on its own
	case first && bytes.HasPrefix(rest, []byte("...")) && !bytes.HasPrefix(rest, []byte("....")):
		g.count()
	case open && c != '#' && (g.lastDelim == 0 || g.col > g.lastDelim):
		if mergeKey(rest) {
			g.swallow()
			return false
		}
		if c == '-' && g.lastDelim > 0 { // the library reads the rest as a folded block
			g.blockText(g.col-1, true)
			return true
		}
		g.nodeCarried = true // as a key, its lines are read as nested
		g.plain()
		return true
	default:
		return false
	}
	g.adv()
	g.adv()
	g.adv()
	return true
}

// token reads the token at c.
func (g *guard) token(c byte) {
	g.plainOpen = false
	switch {
	case c == '#':
		g.skipLine()
	case c == '\'' || c == '"':
		g.count()
		g.start(g.col, true)
		g.quoted(c)
	case c == '[' || c == '{':
		g.flowStart(c)
	case c == ']' || c == '}' && g.flowMaps > 0:
		g.flowEnd(c)
	case c == ',' && g.flowing():
		g.count()
		g.endExplicit()
		g.popToFlow()
		g.afterFlowDelim, g.nodeFresh = g.nodes, false
		g.adv()
	case c == '-' && (g.blankAt(1) || g.peek(1) == 0): // the library takes a NUL for the end too
		g.count()
		g.entry(blockSeq, g.col, g.starts, 0, g.prefixes > 0)
		g.adv()
	case c == '?' && (g.peek(1) == ' ' || g.peek(1) == '\t'):
		g.count()
		l := g.entry(blockMap, g.col, g.starts, 1, g.prefixes > 0)
		g.explicitAt, g.explicitLevel = g.i, len(g.open)-1
		l.entry++ // its key is no value
		g.setKey(l, 0)
		g.adv()
	case c == ':' && g.mapDelim():
		g.mapValue()
	case c == '|' || c == '>':
		g.blockScalar()
	case c == '%' && !g.indented:
		g.count()
		g.directive = true
		g.adv()
	case c == '!' && !g.directive:
		g.tag()
	case c == '&' || c == '*':
		g.anchorOrAlias(c)
	default:
		g.count()
		g.start(g.col, true)
		g.plain()
	}
}

// mapDelim: the ":" here ends a key (the library's scanMapDelim).
func (g *guard) mapDelim() bool {
	if g.directive {
		return false
	}
	if g.flowMaps > 0 {
		return g.peek(1) != '/'
	}
	return g.blankAt(1)
}

// start records a node starting at col (text: a plain or quoted scalar).
func (g *guard) start(col int, text bool) {
	g.starts++
	if !g.nodeFresh || g.nodeLine != g.line { // "'a'b: c": the key is both
		g.nodeAt = g.i
	}
	g.nodeCol, g.ownCol, g.nodeLine, g.nodeText, g.nodeCarried, g.nodeFresh = col, col, g.line, text, false, true
	if g.nodePrefixes = g.prefixes; g.prefixes > 0 {
		g.nodeCol = min(col, g.prefixCol)
		g.nodeCarried = g.prefixLine != g.line || !text || g.prefixes > 1 || !g.prefixGroups
		g.prefixes = 0
	}
}

// prefix records a tag or anchor at col.
func (g *guard) prefix(col int, groups bool) {
	if g.prefixes == 0 || g.prefixLine != g.line {
		g.prefixCol, g.prefixLine = col, g.line
		if g.prefixes > 0 {
			g.prefixes++ // a run after one on an earlier line: the node is theirs
		}
	}
	g.prefixes++
	g.prefixGroups = groups
}

// push opens a level.
func (g *guard) push(kind levelKind, col int) *level {
	base := len("$")
	if n := len(g.open); n > 0 {
		base = g.open[n-1].path()
	}
	g.open = append(g.open, level{kind: kind, col: col, entry: g.starts, base: base})
	g.maxDepth = max(g.maxDepth, len(g.open))
	g.maxPath = max(g.maxPath, g.open[len(g.open)-1].path())
	if len(g.open) > g.lim.depth {
		g.fail(tooDeep, g.lim.depth)
	}
	return &g.open[len(g.open)-1]
}

// popToFlow closes the levels inside the innermost flow collection.
func (g *guard) popToFlow() {
	for n := len(g.open); n > 0 && g.open[n-1].kind < flowSeq; n-- {
		g.open = g.open[:n-1]
	}
}

// entry is a "-" (blockSeq) or a key (blockMap) at col, the nodes started
// before it being starts; delims: the nodes it follows in a flow mapping's
// entry when it is the mapping's own; nests: it opens a level whatever is
// open.
func (g *guard) entry(kind levelKind, col, starts, delims int, nests bool) *level {
	g.endExplicit()
	g.lastDelim = col
	if g.prefixes > 0 { // the list or mapping is at the tag's or anchor's column
		col = min(col, g.prefixCol)
	}
	g.prefixes, g.nodeFresh = 0, false
	if n := len(g.open); n > 0 && g.open[n-1].kind >= flowSeq {
		if top := &g.open[n-1]; kind == blockMap && top.kind == flowMap && g.nodes-g.afterFlowDelim <= delims {
			return top
		}
		return g.push(kind, col)
	}
	for n := len(g.open); n > 0 && !nests && !g.strict; n = len(g.open) {
		top := &g.open[n-1]
		if top.kind >= flowSeq || top.col < col {
			break
		}
		if top.col == col && top.kind == kind {
			top.entry = g.starts
			return top
		}
		if top.col == col && top.entry >= starts { // its entry has no value yet
			break
		}
		g.open = g.open[:n-1]
	}
	return g.push(kind, col)
}

// mapValue is a ":" that ends a key: the node started since the latest
// entry, or the tags and anchors before it. The key is at most as long as
// the text from its start, or from a "?" before it, to here.
func (g *guard) mapValue() {
	g.count()
	col, keyLen, starts, carried, lastDelim := g.col, 0, g.starts, false, g.lastDelim
	if g.explicitAt >= 0 {
		keyLen = g.i - g.explicitAt
	}
	switch {
	case g.nodeFresh:
		col, keyLen, starts, carried = g.nodeCol, max(keyLen, g.i-g.nodeAt), starts-1, g.nodeCarried
		if g.nodeText {
			lastDelim = g.ownCol
		}
	case g.prefixes > 0:
		col, carried = g.prefixCol, true
	}
	var l *level
	if e := g.explicitLevel; g.explicitAt >= 0 && e < len(g.open) && g.starts <= g.open[e].entry && col <= g.open[e].col {
		l = &g.open[e] // the "?"'s own ":" (its key is left of it: read as the deeper)
		g.endExplicit()
		g.prefixes, g.nodeFresh = 0, false
	} else {
		l = g.entry(blockMap, col, starts, 2, carried)
	}
	g.lastDelim = lastDelim
	g.setKey(l, keyLen)
	g.adv()
}

// setKey records that the latest key of l is n long.
func (g *guard) setKey(l *level, n int) {
	l.key = n
	if g.maxPath = max(g.maxPath, l.path()); l.path() > g.lim.path {
		g.fail(tooLongKey, g.lim.path)
	}
}

// endExplicit ends the key of the latest "?", if it is still open: it is
// at most as long as the text since.
func (g *guard) endExplicit() {
	if g.explicitAt >= 0 && g.explicitLevel < len(g.open) {
		l := &g.open[g.explicitLevel]
		g.setKey(l, max(l.key, g.i-g.explicitAt))
	}
	g.explicitAt = -1
}

func (g *guard) flowStart(c byte) {
	g.count()
	g.start(g.col, false)
	kind := flowSeq
	if c == '{' {
		kind = flowMap
		g.flowMaps++
	} else {
		g.flowSeqs++
	}
	g.push(kind, g.col).at = g.i
	g.afterFlowDelim = g.nodes
	g.adv()
}

func (g *guard) flowEnd(c byte) {
	g.count()
	if c == '}' {
		g.flowMaps--
	} else {
		g.flowSeqs-- // the library's count goes below 0 at a "]" too many
	}
	g.endExplicit()
	g.popToFlow()
	if n := len(g.open); n > 0 && g.open[n-1].kind >= flowSeq { // the collection is the latest node
		l := g.open[n-1]
		g.open = g.open[:n-1]
		g.starts, g.nodeAt, g.nodeCol, g.ownCol, g.nodeText, g.nodeCarried, g.nodeFresh = l.entry, l.at, l.col, l.col, false, true, true
	}
	g.adv()
}

// plain reads a plain scalar, or its continuation on a new line.
func (g *guard) plain() {
	from := g.i
	for ; g.i < len(g.text); g.adv() {
		c := g.text[g.i]
		if isBreak(c) {
			g.plainOpen = true
			break
		}
		if c == ' ' && g.directive {
			break
		}
		if c == '#' && g.i > from && (g.text[g.i-1] == ' ' || g.text[g.i-1] == '\t') || c == ':' && g.mapDelim() || g.flowStop(c) {
			break
		}
		if g.i > from && mergeKey(g.text[g.i:]) {
			g.swallow()
			break
		}
	}
}

// swallow undoes the start of the plain scalar that a merge key takes in.
func (g *guard) swallow() {
	g.starts--
	g.prefixes, g.nodeFresh = g.nodePrefixes, false
}

// mergeKey: text starts with a "<<" before a ":", which the library reads as
// a merge key wherever it is.
func mergeKey(text []byte) bool {
	if !bytes.HasPrefix(text, []byte("<<")) || bytes.HasPrefix(text, []byte("<<<")) {
		return false
	}
	t := bytes.TrimLeft(text[2:], " ")
	return len(t) > 1 && t[0] == ':' && (t[1] == ' ' || isBreak(t[1]))
}

// quoted reads a quoted scalar, its quote q at the current byte. After a
// double-quoted one the library's scanner is a character further on for
// each tab in it with text after it on its line, but not right before the
// quote: it skips as many after the quote.
func (g *guard) quoted(q byte) {
	drift, eol, lastText := 0, -1, -1
	for g.adv(); g.i < len(g.text); {
		c := g.text[g.i]
		if c == '\t' && q == '"' {
			if g.i > eol {
				if eol = g.i + bytes.IndexAny(g.text[g.i:], "\r\n"); eol < g.i {
					eol = len(g.text)
				}
				lastText = g.i + bytes.LastIndexFunc(g.text[g.i:eol], func(r rune) bool { return r != ' ' && r != '\t' })
			}
			if lastText > g.i && g.peek(1) != '"' {
				drift++
			}
		}
		g.adv()
		switch {
		case c == q && q == '\'' && g.peek(0) == '\'':
			g.adv()
		case c == q:
			for ; drift > 0 && g.i < len(g.text); drift-- {
				for g.adv(); g.i < len(g.text) && g.text[g.i]&0xc0 == 0x80; {
					g.adv()
				}
			}
			return
		case c == '\\' && q == '"' && g.i < len(g.text):
			g.adv()
		}
	}
}

// blockScalar reads a "|" or ">" block scalar: its header line, then its text.
//
// Without text but blank lines, the library keeps a line break of them to
// start a plain scalar with (but with "+"): the line that ends it is one.
func (g *guard) blockScalar() {
	g.count()
	g.count()
	g.count()
	g.start(g.col, true)
	from := g.i
	g.skipLine()
	header, _, _ := strings.Cut(string(g.text[from:g.i]), "#")
	end, fixed := max(g.lastDelim, 1), false
	if i := strings.IndexAny(header, "123456789"); i >= 0 {
		end, fixed = end+int(header[i]-'0')-1, true
	}
	if g.blockText(end, fixed) && !strings.Contains(header, "+") {
		g.start(g.col, true)
		g.plain()
	}
}

// blockText skips the rest of the line and the lines after it that are
// blank or start right of column end: block text, which ends at a line that
// does not or at a "---" or "..." at a line's start. Unless fixed, the
// column of its first line, less one, is its end. emptied: it ends at a
// line left of end after blank lines only.
func (g *guard) blockText(end int, fixed bool) (emptied bool) {
	g.inBlock = true
	defer func() { g.inBlock = false }()
	g.skipLine()
	for first, blank := true, false; g.i < len(g.text); g.skipLine() {
		if g.adv(); g.text[g.i-1] == '\r' && g.peek(0) == '\n' { // the line break
			g.adv()
		}
		for g.peek(0) == ' ' || g.peek(0) == '\t' {
			g.adv()
		}
		rest := g.text[g.i:]
		if isBreak(g.peek(0)) {
			blank = true
			continue
		}
		if g.i == len(g.text) || g.col == 1 && len(rest) >= 3 && (string(rest[:3]) == "---" || string(rest[:3]) == "...") && g.blankAt(3) {
			break
		}
		if g.col <= end {
			return first && blank
		}
		if first && !fixed {
			end = g.col - 1
		}
		first = false
		g.lastDelim = end
	}
	return false
}

// tag reads a tag, which goes with the node after it.
func (g *guard) tag() {
	g.count()
	col, from := g.col, g.i
	// It ends at a ": " too, which the library may read as a key's after a
	// double-quoted scalar with a tab ("\"\t\"!: x").
	for g.i < len(g.text) && g.text[g.i] != ' ' && !isBreak(g.text[g.i]) && !(g.text[g.i] == ',' && g.flowing()) &&
		!(g.text[g.i] == ':' && g.blankAt(1)) {
		g.adv()
	}
	switch t := string(g.text[from:g.i]); t {
	case "!!int", "!!float", "!!null", "!!str", "!!binary", "!!timestamp", "!!bool":
		g.prefix(col, true)
	default:
		g.prefix(col, !strings.HasPrefix(t, "!!"))
	}
}

// anchorOrAlias reads a "&" or "*" and its name; the library takes whatever
// token follows as the name, so one that is no plain text is left to be read
// as what it is, and every "-" and key nests from here on.
func (g *guard) anchorOrAlias(c byte) {
	g.count()
	col := g.col
	for g.adv(); g.peek(0) == '\t'; { // the library skips tabs here
		g.adv()
	}
	from, next := g.i, g.peek(0)
	odd := g.blankAt(0) || g.flowStop(next) || strings.IndexByte("{[]|>!&*#'\"@`", next) >= 0 || next == '-' && (g.blankAt(1) || g.peek(1) == 0) || next == '?' && (g.peek(1) == ' ' || g.peek(1) == '\t')
	if g.strict = g.strict || odd; !odd {
		for g.i < len(g.text) && g.text[g.i] != ' ' && !isBreak(g.text[g.i]) && !g.flowStop(g.text[g.i]) {
			g.adv()
		}
		g.count()
	}
	if c == '&' {
		g.prefix(col, true)
		return
	}
	g.start(col, false)
	g.nodeAt = min(g.nodeAt, from-1)
}
