package configs

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// checkGuard refuses a file at the file:line:col where it crosses a limit,
// before the YAML library (goccy/go-yaml), which has none, reads it.
//
// The guarantee: it counts at least the tokens (MaxNodes, comments too) the
// library's scanner makes of the whole file, which it reads whatever the
// parser then says, the nesting (MaxDepth) and the longest path (MaxKeyPath)
// the parser builds, and the scanner's steps (MaxScanSteps); it may count
// more. So it reads the text as the scanner does (what is quoted, block or
// plain text or a comment; the columns), for structure taken for text would
// go uncounted, and it ends a level only where the parser must.
// TestTheGuardCountsAtLeastWhatTheYAMLLibraryBuilds and FuzzGuard hold it to
// the library; run FuzzGuard for a while after upgrading goccy/go-yaml.
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
	tooManyNodes = "the file has more than %d YAML nodes by here (each key, value, comment, \"-\", \":\", \",\" and bracket counts), " +
		"the limit for a config file (a real one has a few hundred)"
	tooManySteps = "the YAML library would take more than %d steps to read the file by here, the limit for a config file: " +
		`runs of "<", and tabs in double-quoted text (write \t), cost it the square of their length`
	tooDeep    = "lists and mappings nest more than %d deep here, the limit for a config file (a real one nests about 5 deep)"
	tooLongKey = "the keys leading here, this one included, are more than %d characters long together, the limit for a config file " +
		"(the YAML library copies them into every value below)"
)

// costlyAt is the byte offset where the library's scanner would cross
// MaxScanSteps, or -1: it reads the rest of the line again at a tab (in
// double quotes; here anywhere) and the rest of a run of "<" at each "<".
func costlyAt(text []byte) int {
	steps, eol, run := 0, -1, 0
	for i, c := range text {
		if i > eol {
			if eol = i + bytes.IndexAny(text[i:], "\r\n"); eol < i {
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
			steps, run = steps+run, run-1
		}
		if steps > MaxScanSteps {
			return i
		}
	}
	return -1
}

type guardLimits struct{ depth, nodes, path int }

// level is a list (seq) or mapping open. A flow one keeps the key state at
// its bracket (col, at): the collection may be a key.
type level struct {
	flow, seq          bool
	col, at, base, key int // base: its parent's path
}

func (l *level) path() int {
	if l.seq {
		return l.base + len("[9999]")
	}
	return l.base + len(".''") + max(l.key, len("null"))
}

// guard is the state of the library's scanner, and the levels its parser
// may have open.
type guard struct {
	text                            []byte
	lim                             guardLimits
	i, col, ld                      int // the byte, its column and lastDelimColumn (the latest "-", "?" or key's) as the library counts
	nodes, maxDepth, maxPath, errAt int
	errMsg                          string
	bol, indented, up               bool // at a line's start; indentNum > 0; its first character right of ld
	buf, bufNode, saved             bool // plain text buffered, a scalar's, its column saved at a line break
	bufAt, bufCol, textEnd          int  // textEnd: the column after the latest text
	quoteCol                        int  // the latest token is a quoted scalar, at this column
	flows                           [2]int
	colon, directive                bool // the latest token is a ":"; in a directive
	anchor                          int  // 1 after "&" or "*", 2 in its name
	block, blockText                bool // in block text, which had text (or a tab)
	blockCol, breaks                int  // its column, and line breaks before its text
	spaced, spacedAt                int  // lines of spaces (at blockCol or right) before its text, and the latest's
	chomp                           byte // its header's "+" or "-"
	open                            []level
	keyAt, keyCol                   int // the latest node and the tags and anchors before it: a key if a ":" follows
	plainKey, keyNode, keyOld       bool
	prefix, strict                  bool // a tag or anchor waits for its node; every entry nests
	afterDelim, q, qAt              int  // nodes at the latest "[", "{" or ","; a "?" until its key ends
}

func readGuarded(text []byte, lim guardLimits) *guard {
	g := &guard{text: text, lim: lim, col: 1, bol: true, maxPath: len("$"), keyAt: -1, q: -1}
	for g.i < len(text) && g.errMsg == "" {
		g.step(text[g.i])
	}
	g.closeQ()
	return g
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (g *guard) peek(k int) byte {
	if g.i+k < len(g.text) {
		return g.text[g.i+k]
	}
	return 0
}

func (g *guard) adv(n int) { // n characters on
	for ; n > 0 && g.i < len(g.text); n-- {
		for g.i, g.col = g.i+1, g.col+1; g.i < len(g.text) && g.text[g.i]&0xc0 == 0x80; g.i++ {
		}
	}
}

func (g *guard) skipLine() []byte {
	from := g.i
	for g.i < len(g.text) && g.text[g.i] != '\n' && g.text[g.i] != '\r' {
		g.i++
	}
	return g.text[from:g.i]
}

func (g *guard) fail(format string, limit int) {
	if g.errMsg == "" {
		g.errAt, g.errMsg = g.i, fmt.Sprintf(format, limit)
	}
}

func (g *guard) count(n int) {
	if g.nodes += n; g.nodes > g.lim.nodes {
		g.fail(tooManyNodes, g.lim.nodes)
	}
}

// emit: a token other than a scalar, counting n, ends the buffered text.
func (g *guard) emit(n int) {
	g.strict = g.strict || g.anchor == 1 // a "&" or "*" without a name: the parser takes any token
	g.buf, g.quoteCol, g.colon = false, 0, false
	g.count(n)
}

func (g *guard) flush() {
	if g.buf {
		g.emit(0)
	}
}

func (g *guard) flowing() bool { return g.flows[0] > 0 || g.flows[1] > 0 }

func (g *guard) newline() {
	if g.buf && !g.block && !g.saved { // the library's column of plain text over lines: its first line's end less its length
		g.bufCol, g.saved = g.bufCol+g.col-g.textEnd, true
	}
	if g.anchor > 0 || g.directive {
		g.strict = g.strict || g.anchor == 1
		g.flush()
	}
	if g.text[g.i] == '\r' && g.peek(1) == '\n' {
		g.i++
	}
	g.i, g.col, g.bol, g.indented, g.anchor, g.directive, g.keyOld = g.i+1, 1, true, false, 0, false, true
	if g.block && !g.blockText {
		g.breaks++
	}
}

// step reads the character c at g.i.
func (g *guard) step(c byte) {
	if c == '\n' || c == '\r' {
		g.newline()
		return
	}
	if c == ' ' || c == '\t' {
		if c == ' ' && !g.bol && (g.anchor > 0 || g.directive) { // a name or a directive's word ends
			g.strict, g.anchor = g.strict || g.anchor == 1, 0
			g.flush()
		}
		if g.block && g.bol && c == '\t' {
			g.blockText = true
		} else if g.block && g.bol && g.blockCol > 0 && g.col >= g.blockCol && g.spacedAt <= g.breaks {
			g.spaced, g.spacedAt = g.spaced+1, g.breaks+1
		}
		tabless := c == '\t' && !g.block && g.col > g.ld // a tab the library gives no column
		g.indented = g.indented || c == ' ' && g.bol || tabless
		if g.i++; !tabless {
			g.col++
		}
		return
	}
	if g.up = false; g.bol { // at or left of ld, plain and block text end
		down, mark := g.ld > 0 && g.col <= g.ld, g.col == 1 && g.marker()
		if g.bol = false; g.block && !down && !mark {
			if g.blockCol == 0 {
				g.blockCol = g.col
			}
			if g.blockText = true; g.blockCol > 1 {
				g.ld = g.blockCol - 1
			}
			g.skipLine()
			return
		}
		if down || g.block {
			g.flush()
		}
		if g.block && down && !mark && g.chomped() {
			g.plain() // the library's buffer keeps what it chomped: plain text
		}
		g.block, g.up = false, g.ld > 0 && !down
	}
	g.token(c, g.text[g.i:], g.peek(1))
	g.textEnd = g.col
}

// chomped: the block text ends with no text but line breaks and spaces, which
// the library chomps to nothing (its bufferedSrc) and keeps in its buffer.
func (g *guard) chomped() bool {
	return !g.blockText && g.breaks > 0 && g.chomp != '+' && (g.spaced == 0 || g.chomp == '-' && g.spaced == 1 && g.spacedAt <= 2)
}

// marker: "---" or "..." before a blank or the end.
func (g *guard) marker() bool {
	r := g.text[g.i:]
	return len(r) >= 3 && (string(r[:3]) == "---" || string(r[:3]) == "...") && (len(r) == 3 || isBlank(r[3]))
}

var mergeKey = regexp.MustCompile(`^<<[ :]*:[ \r\n]`) // the library's, wherever it is (not in a run of three "<")

// token reads the token at c, the first of r, or more plain text.
func (g *guard) token(c byte, r []byte, next byte) {
	switch {
	case g.col == 1 && !g.indented && (c == '-' && g.marker() || c == '.' && bytes.HasPrefix(r, []byte("...")) && !bytes.HasPrefix(r, []byte("...."))):
		if g.emit(1); c == '-' { // the parser reads each document on its own
			g.closeQ()
			g.open, g.ld = g.open[:0], 0
		}
		g.adv(2)
	case c == '-' && g.up && g.buf: // the library reads the rest as folded block text
		g.count(1)
		g.block, g.blockCol, g.blockText, g.chomp = true, g.col, true, '-'
		if len(bytes.Trim(g.skipLine()[1:], "\t")) > 0 {
			g.ld = g.blockCol - 1
		}
		return
	case c == '-' && !g.buf && (next == 0 || isBlank(next)):
		g.emit(1)
		g.entry(true, g.col, false, false)
		g.ld, g.keyAt = g.col, -1
	case c == '?' && !g.buf && (next == ' ' || next == '\t'):
		g.emit(1)
		g.entry(false, g.col, false, false)
		g.q, g.qAt, g.ld, g.keyAt, g.prefix = len(g.open)-1, g.i, g.col, -1, true // it takes the next node, wherever
	case c == ':' && g.mapDelim(next):
		g.mapValue()
	case c == '<' && next == '<' && g.peek(2) != '<' && mergeKey.Match(r): // a key; the library drops the text before it
		if g.buf && g.bufNode { // a tag or anchor before it goes with "<<"
			g.keyNode = g.keyAt == g.bufAt
		}
		g.emit(1)
		g.begin(true, false)
		g.ld = g.col
		g.adv(1)
	case (c == '[' || c == '{') && (!g.buf || g.flowing()):
		g.emit(1)
		g.begin(false, false)
		g.push(level{flow: true, seq: c == '[', col: g.keyCol, at: g.keyAt})
		g.flows[strings.IndexByte("[{", c)]++
		g.afterDelim, g.keyAt = g.nodes, -1
	case c == ']' && (!g.buf || g.flows[0] > 0) || c == '}' && g.flows[1] > 0:
		g.emit(1)
		g.flows[strings.IndexByte("]}", c)]-- // below 0 at a "]" too many, as the library's
		if g.closeQ(); g.popToFlow() {        // the collection is the latest node: a key if a ":" follows
			l := g.open[len(g.open)-1]
			g.open = g.open[:len(g.open)-1]
			g.keyAt, g.keyCol, g.plainKey, g.keyNode, g.keyOld = l.at, l.col, false, true, false
		}
	case c == ',' && g.flowing():
		g.emit(1)
		g.closeQ()
		g.popToFlow()
		g.afterDelim, g.keyAt = g.nodes, -1
	case c == '#' && (!g.buf || isBlank(g.text[g.i-1])):
		g.emit(1) // the library keeps a token of each comment: a file of them cost 180 MB
		g.skipLine()
		return
	case (c == '\'' || c == '"') && !g.buf:
		g.quoted(c)
		return
	case (c == '|' || c == '>') && !g.buf:
		g.header()
		return
	case c == '!' && !g.buf && !g.directive: // a tag; the library's columns leave out the space or comma after it
		g.emit(1)
		g.begin(false, true)
		for g.i < len(g.text) && !isBlank(g.text[g.i]) || g.peek(0) == '\t' {
			if g.text[g.i] == ',' && g.flowing() {
				g.col--
				return
			}
			g.adv(1)
		}
		if g.peek(0) == ' ' {
			g.i++
		}
		return
	case c == '%' && !g.buf && !g.indented:
		g.emit(1)
		g.directive = true
	case (c == '&' || c == '*') && !g.buf:
		g.emit(2) // it and its name
		g.begin(false, c == '&')
		g.anchor = 1
	case !g.buf:
		g.plain()
	}
	g.adv(1)
}

// mapDelim: the ":" at g.i ends a key (the library's scanMapDelim).
func (g *guard) mapDelim(next byte) bool {
	if g.anchor > 0 || g.directive {
		return false
	} else if g.flows[1] > 0 {
		return next != '/' && !g.colon
	}
	return isBlank(next) || g.i+1 == len(g.text)
}

// plain begins plain text: a scalar, a "&" or "*"'s name or a directive's word.
func (g *guard) plain() {
	g.buf, g.bufNode, g.saved, g.bufAt, g.bufCol = true, g.anchor != 1 && !g.directive, false, g.i, g.col
	if g.anchor == 1 {
		g.anchor = 2
	} else if g.count(1); !g.directive {
		g.begin(true, false)
	}
}

// begin records a token that may be a key or begin it: a node, or a tag or
// anchor (prefix), which goes with the node after it. A key with one nests:
// the parser may give it the mapping.
func (g *guard) begin(scalar, prefix bool) {
	if g.keyAt < 0 || g.keyOld || g.keyNode {
		g.keyAt, g.keyCol, g.plainKey, g.keyOld = g.i, g.col, !g.prefix, false
	}
	g.plainKey, g.keyNode, g.prefix = g.plainKey && scalar, !prefix, prefix
}

// mapValue reads a ":" after a key: the latest node since the latest
// indicator, on its line or else before, and its tags and anchors. The key is
// at most as long as their text, and a byte more for each escape.
func (g *guard) mapValue() {
	col, keyLen, q, qAt := g.col, 0, g.q, g.qAt
	if g.keyAt >= 0 {
		span := g.text[g.keyAt:g.i]
		col, keyLen = g.keyCol, len(span)+bytes.Count(span, []byte(`\`))
	}
	if g.buf { // the library's lastDelimColumn: its key's, if plain or quoted
		g.ld = g.bufCol
	} else if g.quoteCol > 0 {
		g.ld = g.quoteCol
	}
	n := len(g.open)
	own := n > 0 && g.open[n-1].flow && !g.open[n-1].seq && g.nodes-g.afterDelim <= 2
	g.emit(1)
	l := g.entry(false, col, g.keyAt >= 0 && !g.plainKey, own)
	if q == len(g.open)-1 { // the "?"'s own ":"
		keyLen = max(keyLen, g.i-qAt)
	}
	g.setKey(l, keyLen)
	g.colon, g.keyAt = true, -1
}

// entry opens a level for a "-" (seq) or key at col, or continues one of its
// kind at col; nests: whatever is open; own: a flow mapping's own key. The
// parser ends a level at an entry left of it (or at its column, if of the
// other kind and its entry has a value: here it nests).
func (g *guard) entry(seq bool, col int, nests, own bool) *level {
	g.closeQ()
	nests, g.prefix = nests || g.prefix || g.strict, false
	for n := len(g.open); n > 0; n = len(g.open) {
		switch top := &g.open[n-1]; {
		case top.flow && own:
			return top
		case nests || top.flow || top.col < col || top.col == col && top.seq != seq:
			return g.push(level{seq: seq, col: col})
		case top.col == col:
			return top
		}
		g.open = g.open[:n-1]
	}
	return g.push(level{seq: seq, col: col})
}

func (g *guard) push(l level) *level {
	l.base = len("$")
	if n := len(g.open); n > 0 {
		l.base = g.open[n-1].path()
	}
	if g.open = append(g.open, l); len(g.open) > g.lim.depth {
		g.fail(tooDeep, g.lim.depth)
	}
	g.maxDepth = max(g.maxDepth, len(g.open))
	g.setKey(&g.open[len(g.open)-1], 0)
	return &g.open[len(g.open)-1]
}

func (g *guard) popToFlow() bool { // to the innermost flow level, if any
	for n := len(g.open); n > 0; n-- {
		if g.open[n-1].flow {
			g.open = g.open[:n]
			return true
		}
	}
	return false
}

func (g *guard) setKey(l *level, n int) {
	if l.key = n; l.path() > g.lim.path {
		g.fail(tooLongKey, g.lim.path)
	}
	g.maxPath = max(g.maxPath, l.path())
}

func (g *guard) closeQ() { // the latest "?"'s key ends: at most the text since
	if g.q >= 0 && g.q < len(g.open) {
		g.setKey(&g.open[g.q], max(g.open[g.q].key, g.i-g.qAt))
	}
	g.q = -1
}

// quoted reads a quoted scalar. The library moves on a character more at
// each tab in double quotes that has text after it on its line (and is not
// the last), so it skips as many after the quote.
func (g *guard) quoted(q byte) {
	g.emit(1)
	g.begin(true, false)
	col, drift, eol, lastText, lineStart := g.col, 0, -1, -1, false
	for g.adv(1); g.i < len(g.text); {
		c, next := g.text[g.i], g.peek(1)
		switch {
		case c == '\n' || c == '\r' || c == '\\' && q == '"' && (next == '\n' || next == '\r'):
			from := g.i
			if c == '\\' {
				g.i++
			}
			if g.newline(); c == '\\' && next == '\r' { // the library's column: 1 more after an escaped CR, 2 after CRLF
				g.col += g.i - from - 1
			}
			g.keyOld, lineStart = false, true
			continue
		case c == q && (q == '"' || next != '\''):
			g.adv(1 + drift)
			g.quoteCol = col
			return
		case c == q || c == '\\' && q == '"': // "''", or an escape (\x, \u and \U take their digits)
			g.adv(1 + hexDigits[next])
		case c == '\t' && q == '"' && !lineStart && next != '"':
			if g.i > eol {
				if eol = g.i + bytes.IndexAny(g.text[g.i:], "\r\n"); eol < g.i {
					eol = len(g.text)
				}
				lastText = g.i + bytes.LastIndexFunc(g.text[g.i:eol], func(r rune) bool { return r != ' ' && r != '\t' })
			}
			if lastText > g.i {
				drift++
			}
		}
		lineStart = lineStart && (c == ' ' || c == '\t')
		g.adv(1)
	}
}

var hexDigits = map[byte]int{'x': 2, 'u': 4, 'U': 8}

// header reads a block scalar's header line ("|" or ">", a digit: its text's
// column past ld, "+" or "-": it keeps or strips trailing blanks): block text
// follows.
func (g *guard) header() {
	g.emit(3) // it, its text and the empty text the library may add
	g.begin(true, false)
	if g.col == 1 {
		g.ld = 1
	}
	opt, _, _ := bytes.Cut(g.skipLine(), []byte("#"))
	if g.i < len(g.text) {
		g.newline()
	}
	g.block, g.blockCol, g.blockText, g.breaks, g.spaced, g.spacedAt, g.chomp = true, 0, false, 0, 0, 0, 0
	if k := bytes.IndexAny(opt, "+-"); k >= 0 {
		g.chomp = opt[k]
	}
	if k := bytes.IndexAny(opt, "123456789"); k >= 0 {
		g.blockCol = g.ld + int(opt[k]-'0')
	}
}
