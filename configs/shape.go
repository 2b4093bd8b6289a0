package configs

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The YAML library (goccy/go-yaml) has no option that bounds what it builds:
// its scanner makes a token of every bracket, and its parser gives every node
// the path of keys and indices that leads to it, so that nesting costs the
// square of its depth (20,000 levels of "[" in a 40 KB file ran the process
// out of memory). checkShape measures the file first, the way the library's
// scanner will read it, and refuses it before the library builds anything.
//
// shapeScanner follows the library's scanner (scanner/scanner.go in
// goccy/go-yaml v1.19.2) step by step, keeping only what decides how the rest
// of the file is read: whether a character starts a token or continues a
// plain scalar, where quoted and block scalars and comments begin and end,
// the flow brackets and the columns that end a block. It builds no tokens: it
// counts them (nodes) and keeps the stack of lists and mappings open at each
// point (levels) by the parser's rules (parser/parser.go, parser/token.go),
// which nest more than YAML does, reading a doubtful case as the deeper one.
// It also counts the steps the library's scanner takes beyond one a
// character, and how long the parser's path of each level is.
// TestTheShapeScanReadsTheFileAsTheYAMLLibraryDoes and FuzzShape hold it to
// the library: the same tokens, nesting at least as deep as the library's
// tree. After upgrading goccy/go-yaml, run FuzzShape for a while.

// tokenKind is what the library's last token in its current scan was, as far
// as the scan needs it.
type tokenKind uint8

const (
	noToken tokenKind = iota
	otherToken
	quotedToken
	mappingValueToken
	stringToken // a block scalar's content
)

type indentState uint8

const (
	indentEqual indentState = iota
	indentUp
	indentDown
	indentKeep
)

// multiLine is the library's MultiLineState: a block scalar ("|" or ">") or
// a plain scalar folded over lines that start with "-".
type multiLine struct {
	opt                              string
	firstLineIndentColumn            int
	prevLineIndentColumn             int
	lineIndentColumn                 int
	lastNotSpaceOnlyLineIndentColumn int
	spaceOnlyIndentColumn            int
	foldedNewLine                    bool
	isRawFolded                      bool
	isLiteral                        bool
}

// shapeScanner reads src as the library's scanner does. Its fields mirror the
// library's Scanner and, from buf on, its Context, which the library starts
// afresh after each invalid token (newContext).
type shapeScanner struct {
	src               []rune
	idx               int // the library's sourcePos
	ctxStart          int // where the current Context began
	column            int
	indentNum         int
	lastDelimColumn   int
	isFirstCharAtLine bool
	isAnchor          bool
	isAlias           bool
	isDirective       bool
	flowSeqNum        int
	flowMapNum        int
	indentState       indentState
	savedColumn       int
	savedLine         int
	line              int // as the library counts them
	saved             bool

	buf             []rune
	obuf            []rune
	notSpaceCharPos int
	notSpaceOrgPos  int
	ml              *multiLine
	lastToken       tokenKind
	lastTokenColumn int

	// The line lineAfter read last: [lineStart, lineEnd), its last text at
	// lineText; the run of one character repeatNum read last.
	lineStart, lineEnd, lineText int
	runStart, runEnd             int

	// What the scan measures.
	meter shapeMeter
	tree  shapeParser
}

// checkShape refuses data, a file's UTF-8 text, if its lists and mappings
// nest deeper than MaxDepth, it holds more than MaxNodes YAML nodes, the keys
// leading to a value are longer than MaxKeyPath together, or the library's
// scanner would take more than MaxScanSteps steps over it, at the first place
// that crosses a limit.
func checkShape(file string, data []byte) *Error {
	s := scanShape(data, shapeCaps{MaxDepth, MaxNodes, MaxKeyPath, MaxScanSteps})
	if s.meter.limit == nil {
		return nil
	}
	return &Error{Pos: offsetPos(file, data, runeOffset(data, s.meter.limit.at)), Msg: s.meter.limit.msg}
}

// shapeCaps are the limits of a scan.
type shapeCaps struct{ depth, nodes, keyPath, steps int }

// scanShape scans data with the given limits; the scan stops at the first one
// crossed.
func scanShape(data []byte, caps shapeCaps) *shapeScanner {
	s := &shapeScanner{src: []rune(string(data)), column: 1, line: 1, isFirstCharAtLine: true,
		meter: shapeMeter{caps: caps}}
	s.tree = newShapeParser(&s.meter)
	for s.idx < len(s.src) && s.meter.limit == nil {
		// lexer.Tokenize: Scan until the end, each time with a new Context.
		s.ctxStart = s.idx
		s.resetBuffer()
		s.ml = nil
		s.lastToken = noToken
		s.scan()
	}
	return s
}

// runeOffset is the byte offset of the rune at index i of data.
func runeOffset(data []byte, i int) int {
	off := 0
	for ; i > 0 && off < len(data); i-- {
		_, size := utf8.DecodeRune(data[off:])
		off += size
	}
	return off
}

// ---- the library's Context ----

func (s *shapeScanner) resetBuffer() {
	s.buf = s.buf[:0]
	s.obuf = s.obuf[:0]
	s.notSpaceCharPos = 0
	s.notSpaceOrgPos = 0
}

func (s *shapeScanner) clear() {
	s.resetBuffer()
	s.ml = nil
}

func (s *shapeScanner) addBuf(r rune) {
	if len(s.buf) == 0 && (r == ' ' || r == '\t') {
		return
	}
	s.buf = append(s.buf, r)
	if r != ' ' && r != '\t' {
		s.notSpaceCharPos = len(s.buf)
	}
}

func (s *shapeScanner) addBufWithTab(r rune) {
	if len(s.buf) == 0 && r == ' ' {
		return
	}
	s.buf = append(s.buf, r)
	if r != ' ' {
		s.notSpaceCharPos = len(s.buf)
	}
}

func (s *shapeScanner) addOriginBuf(r rune) {
	s.obuf = append(s.obuf, r)
	if r != ' ' && r != '\t' {
		s.notSpaceOrgPos = len(s.obuf)
	}
}

func (s *shapeScanner) removeRightSpaceFromBuf() {
	if len(s.obuf) > s.notSpaceOrgPos {
		s.obuf = s.obuf[:s.notSpaceOrgPos]
		s.buf = s.bufferedSrc()
	}
}

func (s *shapeScanner) bufferedSrc() []rune {
	src := s.buf[:s.notSpaceCharPos]
	if s.ml == nil {
		return src
	}
	// Block chomping, as the library does it: only whether anything is left
	// matters here.
	str := string(src)
	m := s.ml
	if m.hasTrimAllEndNewlineOpt() {
		str = strings.TrimRight(str, "\n")
	} else if !m.hasKeepAllEndNewlineOpt() {
		n := len(str) - len(strings.TrimRight(str, "\n"))
		if n > 1 {
			str = str[:len(str)-(n-1)]
		}
	}
	if m.hasTrimAllEndNewlineOpt() {
		str = strings.TrimRight(str, " ")
	}
	if str == "\n" {
		str = ""
	}
	if m.hasKeepAllEndNewlineOpt() && str == "" {
		str = "\n"
	}
	return []rune(str)
}

func (s *shapeScanner) existsBuffer() bool { return len(s.bufferedSrc()) != 0 }

func (s *shapeScanner) previousChar() rune {
	if s.idx > s.ctxStart {
		return s.src[s.idx-1]
	}
	return 0
}

func (s *shapeScanner) nextChar() rune {
	if s.idx+1 < len(s.src) {
		return s.src[s.idx+1]
	}
	return 0
}

func (s *shapeScanner) isEOS() bool     { return len(s.src)-1 <= s.idx }
func (s *shapeScanner) isNextEOS() bool { return len(s.src) <= s.idx+1 }

// repeatNum is how many times r is repeated from the current character on.
// (The library counts the run at each of its characters; the scan reads each
// run once.)
func (s *shapeScanner) repeatNum(r rune) int {
	if s.idx < s.runStart || s.idx >= s.runEnd || s.src[s.idx] != r {
		s.runStart, s.runEnd = s.idx, s.idx
		for s.runEnd < len(s.src) && s.src[s.runEnd] == r {
			s.runEnd++
		}
	}
	return s.runEnd - s.idx
}

// ---- the library's Scanner ----

func isNewLine(c rune) bool { return c == '\n' || c == '\r' }

func (s *shapeScanner) progressColumn(n int) { s.column += n; s.idx += n }
func (s *shapeScanner) progress(n int)       { s.idx += n }

func (s *shapeScanner) progressLine() {
	s.line++
	s.column = 1
	s.indentNum = 0
	s.isFirstCharAtLine = true
	s.isAnchor, s.isAlias, s.isDirective = false, false, false
	s.idx++
}

func (s *shapeScanner) addToken(kind tokenKind, col int) {
	s.tree.token(s.idx, false)
	s.lastToken, s.lastTokenColumn = kind, col
}

// bufferedToken makes a token of the buffer, if it holds anything, and
// returns its column.
func (s *shapeScanner) bufferedToken() (col int, ok bool) {
	col, line := s.column-len(s.buf), s.line
	if s.ml != nil {
		col = strings.Index(string(s.obuf), string(s.buf)) + 1
	}
	if s.saved {
		col, line = s.savedColumn, s.savedLine
		s.saved = false
	}
	if s.idx == s.ctxStart {
		return 0, false
	}
	length := len(s.bufferedSrc())
	if length == 0 {
		s.buf = s.buf[:0]
		return 0, false
	}
	kind := otherToken
	if s.ml != nil {
		kind = stringToken
	}
	s.tree.token(s.idx, true)
	s.lastToken, s.lastTokenColumn = kind, col
	if s.ml == nil || s.ml.isRawFolded {
		s.tree.nodeStart(col, line, true, length) // a plain scalar
	}
	s.resetBuffer()
	return col, true
}

func (s *shapeScanner) addBufferedTokenIfExists() { s.bufferedToken() }

func (s *shapeScanner) updateIndent(c rune) {
	if s.isFirstCharAtLine && isNewLine(c) {
		return
	}
	if s.isFirstCharAtLine && c == ' ' {
		s.indentNum++
		return
	}
	if s.isFirstCharAtLine && c == '\t' {
		return
	}
	if !s.isFirstCharAtLine {
		s.indentState = indentKeep
		return
	}
	if s.lastDelimColumn != 0 {
		if s.lastDelimColumn < s.column {
			s.indentState = indentUp
		} else {
			s.indentState = indentDown
		}
	}
	s.isFirstCharAtLine = false
}

// scan is the library's Scanner.scan: it returns at the end of the text, at
// an invalid token, or when a limit is crossed.
func (s *shapeScanner) scan() {
	for s.idx < len(s.src) && s.meter.limit == nil {
		c := s.src[s.idx]
		s.updateIndent(c)
		if s.indentState == indentDown {
			s.addBufferedTokenIfExists()
		}
		if s.ml != nil {
			if s.indentState == indentDown {
				// The block ends here: the library reads this character
				// again outside it (after an invalid token when the block
				// had no content at column 1: the same for what follows).
				if s.lastToken != noToken && s.lastTokenColumn == 1 {
					s.meter.uncounted() // "could not find multi-line content"
					return
				}
				if s.lastToken != noToken && s.lastToken != stringToken {
					s.addToken(stringToken, s.column) // the empty content's token
				}
				s.ml = nil
			} else {
				if !s.scanMultiLine(c) {
					s.meter.uncounted() // the invalid token
					return
				}
				continue
			}
		}
		handled, ok := s.scanChar(c)
		if !ok {
			s.meter.uncounted() // the invalid token
			return
		}
		if handled {
			continue
		}
		s.addBuf(c)
		s.addOriginBuf(c)
		s.progressColumn(1)
	}
	s.addBufferedTokenIfExists()
}

// scanChar is the switch of the library's scan loop: handled when c began or
// ended a token, !ok at an invalid token.
func (s *shapeScanner) scanChar(c rune) (handled, ok bool) {
	switch c {
	case '{':
		if s.existsBuffer() && !s.isFlowMode() {
			return false, true
		}
		s.flowStart(flowMap)
		return true, true
	case '}':
		if s.flowMapNum <= 0 {
			return false, true
		}
		s.flowEnd(&s.flowMapNum)
		return true, true
	case '[':
		if s.existsBuffer() && !s.isFlowMode() {
			return false, true
		}
		s.flowStart(flowSeq)
		return true, true
	case ']':
		if s.existsBuffer() && s.flowSeqNum <= 0 {
			return false, true
		}
		s.flowEnd(&s.flowSeqNum)
		return true, true
	case ',':
		if !s.isFlowMode() {
			return false, true
		}
		s.addBufferedTokenIfExists()
		s.addOriginBuf(c)
		s.addToken(otherToken, s.column)
		s.tree.flowEntry()
		s.progressColumn(1)
		s.clear()
		return true, true
	case '.':
		if s.indentNum != 0 || s.column != 1 || s.repeatNum('.') != 3 {
			return false, true
		}
		s.addBufferedTokenIfExists()
		s.addToken(otherToken, s.column)
		s.progressColumn(3)
		s.clear()
		return true, true
	case '<':
		if !s.isMergeKey() {
			return false, true
		}
		s.lastDelimColumn = s.column
		s.addToken(otherToken, s.column)
		s.tree.nodeStart(s.column, s.line, false, len("<<"))
		s.progressColumn(2)
		s.clear()
		return true, true
	case '-':
		if s.scanDocumentStart() {
			return true, true
		}
		if s.existsBuffer() && s.indentState == indentUp {
			// A plain scalar folded over lines that start with "-".
			m := &multiLine{isRawFolded: true}
			m.updateIndentColumn(s.column)
			s.ml = m
			s.addBuf('-')
			s.addOriginBuf('-')
			s.progressColumn(1)
			return true, true
		}
		if s.existsBuffer() {
			return false, true
		}
		if nc := s.nextChar(); nc != 0 && nc != ' ' && nc != '\t' && !isNewLine(nc) {
			return false, true
		}
		if s.obufStartsWithTab() {
			s.progressColumn(1)
			return false, false
		}
		s.addBufferedTokenIfExists()
		s.addOriginBuf('-')
		s.addToken(otherToken, s.column)
		s.lastDelimColumn = s.column
		s.tree.seqEntry(s.column, s.idx)
		s.progressColumn(1)
		s.clear()
		return true, true
	case ':':
		return s.scanMapDelim()
	case '|', '>':
		if s.existsBuffer() {
			return false, true
		}
		return true, s.scanMultiLineHeader()
	case '!':
		if s.existsBuffer() || s.isDirective {
			return false, true
		}
		return s.scanTag()
	case '%':
		if s.existsBuffer() || s.indentNum != 0 {
			return false, true
		}
		s.addBufferedTokenIfExists()
		s.addOriginBuf('%')
		s.addToken(otherToken, s.column)
		s.progressColumn(1)
		s.clear()
		s.isDirective = true
		return true, true
	case '?':
		if s.existsBuffer() {
			return false, true
		}
		if nc := s.nextChar(); nc != ' ' && nc != '\t' {
			return false, true
		}
		s.addToken(otherToken, s.column)
		s.lastDelimColumn = s.column
		s.tree.keyEntry(s.column, s.idx, false, s.tree.afterPrefix(), true, 0)
		s.progressColumn(1)
		s.clear()
		return true, true
	case '&', '*':
		if s.existsBuffer() {
			return false, true
		}
		s.addBufferedTokenIfExists()
		s.addOriginBuf(c)
		s.addToken(otherToken, s.column)
		if c == '*' {
			s.tree.alias(s.column, s.line)
		} else {
			s.tree.anchor(s.column, s.line)
		}
		s.progressColumn(1)
		s.isAnchor, s.isAlias = s.isAnchor || c == '&', s.isAlias || c == '*'
		s.clear()
		return true, true
	case '#':
		return s.scanComment(), true
	case '\'', '"':
		if s.existsBuffer() {
			return false, true
		}
		return true, s.scanQuote(c)
	case '\r', '\n':
		s.scanNewLine(c)
		return true, true
	case ' ':
		return s.scanWhiteSpace(), true
	case '@', '`':
		if s.existsBuffer() {
			return false, true
		}
		s.addBuf(c)
		s.addOriginBuf(c)
		s.progressColumn(1)
		s.clear()
		return false, false
	case '\t':
		if s.existsBuffer() && s.lastDelimColumn == 0 || s.lastDelimColumn < s.column {
			s.indentNum++
			s.addOriginBuf(c)
			s.progress(1)
			return true, true
		}
		if s.isFlowMode() || !s.isFirstCharAtLine {
			return false, true
		}
		s.addBuf(c)
		s.addOriginBuf(c)
		s.progressColumn(1)
		s.clear()
		return false, false
	}
	return false, true
}

func (s *shapeScanner) isFlowMode() bool { return s.flowSeqNum > 0 || s.flowMapNum > 0 }

func (s *shapeScanner) flowStart(kind levelKind) {
	s.addBufferedTokenIfExists()
	s.addOriginBuf(s.src[s.idx])
	s.addToken(otherToken, s.column)
	if kind == flowMap {
		s.flowMapNum++
	} else {
		s.flowSeqNum++
	}
	s.tree.flowStart(kind, s.column, s.line, s.idx)
	s.progressColumn(1)
	s.clear()
}

func (s *shapeScanner) flowEnd(num *int) {
	s.addBufferedTokenIfExists()
	s.addOriginBuf(s.src[s.idx])
	s.addToken(otherToken, s.column)
	*num--
	s.tree.flowEnd()
	s.progressColumn(1)
	s.clear()
}

// obufStartsWithTab: the library refuses a "-" or ":" after an indentation
// that starts with a tab (after at most one space).
func (s *shapeScanner) obufStartsWithTab() bool {
	o := s.obuf
	if len(o) > 0 && o[0] == ' ' {
		o = o[1:]
	}
	return len(o) > 0 && o[0] == '\t'
}

func (s *shapeScanner) isMergeKey() bool {
	run := s.repeatNum('<')
	s.meter.work(run, s.idx) // the library counts the run here
	if run != 2 {
		return false
	}
	for i := s.idx + 2; i < len(s.src); i++ {
		c := s.src[i]
		if c == ' ' {
			continue
		}
		if c != ':' {
			return false
		}
		if i+1 < len(s.src) {
			if nc := s.src[i+1]; nc == ' ' || isNewLine(nc) {
				return true
			}
		}
	}
	return false
}

func (s *shapeScanner) scanDocumentStart() bool {
	if s.indentNum != 0 || s.column != 1 || s.repeatNum('-') != 3 {
		return false
	}
	if s.idx+3 < len(s.src) {
		if c := s.src[s.idx+3]; c != ' ' && c != '\t' && !isNewLine(c) {
			return false
		}
	}
	s.addBufferedTokenIfExists()
	s.addToken(otherToken, s.column)
	s.progressColumn(3)
	s.clear()
	s.lastDelimColumn, s.indentNum = 0, 0
	s.tree.documentStart()
	return true
}

func (s *shapeScanner) scanMapDelim() (handled, ok bool) {
	nc := s.nextChar()
	if s.isDirective || s.isAnchor || s.isAlias {
		return false, true
	}
	if s.flowMapNum <= 0 && nc != ' ' && nc != '\t' && !isNewLine(nc) && !s.isNextEOS() {
		return false, true
	}
	if s.flowMapNum > 0 && nc == '/' {
		return false, true
	}
	if s.flowMapNum > 0 && s.lastToken == mappingValueToken {
		return false, true
	}
	if s.obufStartsWithTab() && (len(s.buf) == 0 || s.buf[0] != '\t') {
		s.progressColumn(1)
		return false, false
	}
	if col, ok := s.bufferedToken(); ok {
		s.lastDelimColumn = col
	} else if s.lastToken == quotedToken {
		s.lastDelimColumn = s.lastTokenColumn
	}
	s.addToken(mappingValueToken, s.column)
	s.tree.mapValue(s.column, s.idx)
	s.progressColumn(1)
	s.clear()
	return true, true
}

func (s *shapeScanner) scanComment() bool {
	if s.existsBuffer() {
		if c := s.previousChar(); c != ' ' && c != '\t' && !isNewLine(c) {
			return false
		}
	}
	s.addBufferedTokenIfExists()
	s.meter.uncounted()
	s.lastToken, s.lastTokenColumn = otherToken, s.column
	s.progress(1) // the '#'
	for i := s.idx; i < len(s.src); i++ {
		if isNewLine(s.src[i]) {
			s.progressColumn(i - s.idx)
			s.progressLine()
			s.clear()
			return true
		}
	}
	s.progressColumn(len(s.src) - s.idx)
	s.progressLine()
	s.clear()
	return true
}

func (s *shapeScanner) scanNewLine(c rune) {
	if len(s.buf) > 0 && !s.saved {
		s.saved, s.savedColumn, s.savedLine = true, s.column-len(s.bufferedSrc()), s.line
	}
	s.removeRightSpaceFromBuf()
	if c == '\r' && s.nextChar() == '\n' {
		s.addOriginBuf('\r')
		s.progress(1)
		c = '\n'
	}
	if s.isEOS() || s.isAnchor || s.isAlias || s.isDirective {
		s.addBufferedTokenIfExists()
	}
	if s.existsBuffer() && s.isFirstCharAtLine {
		if s.buf[len(s.buf)-1] == ' ' {
			s.buf[len(s.buf)-1] = '\n'
		} else {
			s.buf = append(s.buf, '\n')
		}
	} else {
		s.addBuf(' ')
	}
	s.addOriginBuf(c)
	s.progressLine()
}

func (s *shapeScanner) scanWhiteSpace() bool {
	if !s.isAnchor && !s.isDirective && !s.isAlias && !s.isFirstCharAtLine {
		return false
	}
	if s.isFirstCharAtLine {
		s.progressColumn(1)
		s.addOriginBuf(' ')
		return true
	}
	if s.isDirective {
		s.addBufferedTokenIfExists()
		s.progressColumn(1)
		s.addOriginBuf(' ')
		return true
	}
	s.addBufferedTokenIfExists()
	s.isAnchor, s.isAlias = false, false
	return true
}

// scanTag skips a tag ("!name ") as the library does.
func (s *shapeScanner) scanTag() (handled, ok bool) {
	s.addOriginBuf('!')
	start := s.idx
	s.progress(1)
	progress := 0
	for i, c := range s.src[s.idx:] {
		progress = i + 1
		switch c {
		case ' ':
			s.addToken(otherToken, s.column)
			s.tree.prefix(s.column, s.line, tagGroups(string(s.src[start:s.idx+i])), s.idx+i-start)
			s.progressColumn(s.idx + i - start)
			s.clear()
			return true, true
		case ',':
			if s.isFlowMode() {
				s.addToken(otherToken, s.column)
				s.tree.prefix(s.column, s.line, tagGroups(string(s.src[start:s.idx+i])), s.idx+i-start)
				s.progressColumn(s.idx + i - start - 1)
				s.clear()
				return true, true
			}
		case '\n', '\r':
			s.addToken(otherToken, s.column)
			s.tree.prefix(s.column, s.line, tagGroups(string(s.src[start:s.idx+i])), s.idx+i-start)
			s.progressColumn(s.idx + i - start - 1)
			s.clear()
			return true, true
		case '{', '}':
			s.progressColumn(progress)
			return false, false
		}
	}
	s.progressColumn(progress)
	s.clear()
	return true, true
}

// scanQuote skips a quoted scalar as the library does; !ok when the library
// finds it invalid (where it then goes on reading).
func (s *shapeScanner) scanQuote(q rune) bool {
	col, line, start := s.column, s.line, s.idx
	ok := s.skipQuoted(q)
	if !ok {
		return false
	}
	s.addToken(quotedToken, col)
	s.tree.nodeStart(col, line, true, s.idx-start)
	s.clear()
	return true
}

func (s *shapeScanner) skipQuoted(q rune) bool {
	src := s.src
	size := len(src)
	isFirstLineChar, isNewLine_ := false, false
	for idx := s.idx + 1; idx < size; idx++ {
		if !isNewLine_ {
			s.progressColumn(1)
		} else {
			isNewLine_ = false
		}
		c := src[idx]
		switch {
		case isNewLine(c):
			isFirstLineChar, isNewLine_ = true, true
			s.progressLine()
			if idx+1 < size && foundDocumentSeparatorMarker(src[idx+1:]) {
				return false
			}
			continue
		case isFirstLineChar && c == ' ':
			continue
		case isFirstLineChar && c == '\t':
			if s.lastDelimColumn >= s.column {
				return false
			}
			continue
		}
		if q == '\'' {
			if c != '\'' {
				isFirstLineChar = false
				continue
			}
			if idx+1 < size && src[idx+1] == '\'' {
				idx++
				s.progressColumn(1)
				continue
			}
			s.progressColumn(1)
			return true
		}
		switch {
		case c == '\\':
			isFirstLineChar = false
			if idx+1 >= size {
				continue
			}
			progress := 0
			switch src[idx+1] {
			case '0', 'a', 'b', 't', 'n', 'v', 'f', 'r', 'e', ' ', '"', '/', '\\', 'N', '_', 'L', 'P', '\t':
				progress = 1
			case 'x':
				progress = 1
				if idx+3 < size {
					progress = 3
				}
			case 'u':
				if idx+5 >= size {
					return false
				}
				progress = 5
				if code := hexRunes(src[idx+2 : idx+6]); code >= 0xD800 && code <= 0xDBFF {
					if idx+11 >= size || src[idx+6] != '\\' || src[idx+7] != 'u' {
						return false
					}
					if low := hexRunes(src[idx+8 : idx+12]); low < 0xDC00 || low > 0xDFFF {
						return false
					}
					progress += 6
				}
			case 'U':
				if idx+9 >= size {
					return false
				}
				progress = 9
			case '\n':
				isFirstLineChar, isNewLine_ = true, true
				s.progressColumn(1)
				s.progressLine()
				idx++
				continue
			case '\r':
				isFirstLineChar, isNewLine_ = true, true
				s.progressLine()
				progress = 1
				if idx+2 < size && src[idx+2] == '\n' {
					progress = 2
				}
			default:
				s.progressColumn(1)
				return false
			}
			idx += progress
			s.progressColumn(progress)
			continue
		case c == '\t':
			// The library looks at the rest of the line at each tab: is
			// there more than blanks?
			eol, lastText := s.lineAfter(idx)
			s.meter.work(eol-idx, idx)
			found, progress := lastText > idx, eol-idx-1
			if found {
				if src[idx+1] != '"' {
					s.progressColumn(1)
				}
			} else {
				idx += progress
				s.progressColumn(progress)
			}
			continue
		case c != '"':
			isFirstLineChar = false
			continue
		}
		s.progressColumn(1)
		return true
	}
	s.progressColumn(1)
	return false
}

// lineAfter returns the end of the line holding src[i] (its line break, or
// the end of the text) and the index of its last character that is neither a
// space nor a tab (-1 if none), reading each line once however often asked.
func (s *shapeScanner) lineAfter(i int) (eol, lastText int) {
	if i >= s.lineStart && i < s.lineEnd {
		return s.lineEnd, s.lineText
	}
	s.lineStart, s.lineText = i, -1
	for s.lineEnd = i; s.lineEnd < len(s.src) && !isNewLine(s.src[s.lineEnd]); s.lineEnd++ {
		if c := s.src[s.lineEnd]; c != ' ' && c != '\t' {
			s.lineText = s.lineEnd
		}
	}
	return s.lineEnd, s.lineText
}

func hexRunes(b []rune) int {
	sum := 0
	for i, r := range b {
		var d int
		switch {
		case r >= 'A' && r <= 'F':
			d = int(r) - 'A' + 10
		case r >= 'a' && r <= 'f':
			d = int(r) - 'a' + 10
		default:
			d = int(r) - '0'
		}
		sum += d << (uint(len(b)-i-1) * 4)
	}
	return sum
}

func foundDocumentSeparatorMarker(src []rune) bool {
	if len(src) < 3 {
		return false
	}
	var marker string
	if len(src) == 3 {
		marker = string(src)
	} else {
		marker = strings.TrimRight(string(src[:4]), " \t\n\r")
	}
	return marker == "---" || marker == "..."
}

// scanMultiLineHeader reads a block scalar's header ("|", ">-", "|2 # …")
// and starts the block, as the library does.
func (s *shapeScanner) scanMultiLineHeader() bool {
	header := s.src[s.idx]
	s.addOriginBuf(header)
	s.progress(1)
	rest := s.src[s.idx:]
	progress, crlf := 0, false
	for i, c := range rest {
		progress = i
		if isNewLine(c) {
			if c == '\r' && i+1 < len(rest) && rest[i+1] == '\n' {
				crlf = true
				continue
			}
			break
		}
	}
	end := progress
	if crlf {
		end--
	}
	if end < 0 {
		end = 0
	}
	value := strings.TrimRight(string(rest[:end]), " ")
	opt := value
	if i := strings.Index(value, "#"); i > 0 {
		opt = value[:i]
	}
	opt = strings.TrimRight(opt, " \t")
	if opt != "" && !validBlockHeaderOption(opt) {
		s.progressColumn(progress)
		return false
	}
	if s.column == 1 {
		s.lastDelimColumn = 1
	}
	s.addToken(otherToken, s.column)
	s.tree.nodeStart(s.column, s.line, true, 0)
	if i := slices.Index(rest[:min(progress+1, len(rest))], '#'); i >= 0 {
		s.meter.uncounted() // the comment after the header
		s.lastTokenColumn = s.column + 1 + i
	}
	m := &multiLine{isLiteral: header == '|', opt: opt}
	if indent := blockIndentOption(opt); indent > 0 {
		m.firstLineIndentColumn = s.lastDelimColumn + indent
	}
	s.ml = m
	s.indentState = indentKeep
	s.buf, s.notSpaceCharPos = s.buf[:0], 0
	s.obuf, s.notSpaceOrgPos = s.obuf[:0], 0
	s.progressColumn(progress)
	s.progressLine()
	return true
}

func trimChomping(opt string) string {
	opt = strings.TrimPrefix(opt, "-")
	opt = strings.TrimPrefix(opt, "+")
	opt = strings.TrimSuffix(opt, "-")
	return strings.TrimSuffix(opt, "+")
}

func validBlockHeaderOption(opt string) bool {
	opt = trimChomping(opt)
	if opt == "" {
		return true
	}
	if opt == "0" {
		return false
	}
	i, err := strconv.ParseInt(opt, 10, 64)
	return err == nil && i <= 9
}

func blockIndentOption(opt string) int {
	i, _ := strconv.ParseInt(trimChomping(opt), 10, 64)
	return int(i)
}

func (m *multiLine) hasTrimAllEndNewlineOpt() bool {
	return strings.HasPrefix(m.opt, "-") || strings.HasSuffix(m.opt, "-") || m.isRawFolded
}

func (m *multiLine) hasKeepAllEndNewlineOpt() bool {
	return strings.HasPrefix(m.opt, "+") || strings.HasSuffix(m.opt, "+")
}

func (m *multiLine) updateIndentColumn(column int) {
	if m.firstLineIndentColumn == 0 {
		m.firstLineIndentColumn = column
	}
	if m.lineIndentColumn == 0 {
		m.lineIndentColumn = column
	}
}

func (m *multiLine) validIndentColumn() bool {
	return blockIndentOption(m.opt) == 0 || m.firstLineIndentColumn <= m.lineIndentColumn
}

func (m *multiLine) isIndentColumn(column int) bool {
	if m.firstLineIndentColumn == 0 {
		return column == 1
	}
	return m.firstLineIndentColumn > column
}

// scanMultiLine is one character inside a block scalar; false at an invalid
// token.
func (s *shapeScanner) scanMultiLine(c rune) bool {
	m := s.ml
	s.addOriginBuf(c)
	if c == '\r' {
		if s.nextChar() == '\n' {
			s.addOriginBuf('\n')
			s.progress(1)
		}
		c = '\n'
	}
	switch {
	case s.isEOS():
		if s.isFirstCharAtLine && c == ' ' {
			s.addIndent(s.column)
		} else {
			s.addBuf(c)
		}
		m.updateIndentColumn(s.column)
		if !m.validIndentColumn() {
			s.progressColumn(1)
			return false
		}
		s.addToken(stringToken, s.column)
		s.clear()
		s.progressColumn(1)
	case isNewLine(c):
		s.addBuf(c)
		if m.firstLineIndentColumn == 0 {
			m.spaceOnlyIndentColumn = s.column - 1
		}
		m.prevLineIndentColumn = m.lineIndentColumn
		if m.lineIndentColumn != 0 {
			m.lastNotSpaceOnlyLineIndentColumn = m.lineIndentColumn
		}
		m.foldedNewLine = true
		m.lineIndentColumn = 0
		s.progressLine()
		if s.idx < len(s.src) && foundDocumentSeparatorMarker(s.src[s.idx:]) {
			s.addToken(stringToken, s.column)
			s.clear()
		}
	case s.isFirstCharAtLine && c == ' ':
		s.addIndent(s.column)
		s.progressColumn(1)
	case s.isFirstCharAtLine && c == '\t' && m.isIndentColumn(s.column):
		s.progressColumn(1)
		return false
	case c == '\t' && !m.isIndentColumn(s.column):
		s.addBufWithTab(c)
		s.progressColumn(1)
	default:
		if m.firstLineIndentColumn == 0 && m.spaceOnlyIndentColumn > s.column {
			s.progressColumn(1)
			return false
		}
		m.updateIndentColumn(s.column)
		if !m.validIndentColumn() {
			s.progressColumn(1)
			return false
		}
		if m.firstLineIndentColumn > 1 {
			s.lastDelimColumn = m.firstLineIndentColumn - 1
		}
		s.foldNewLine(s.column)
		s.addBufWithTab(c)
		s.progressColumn(1)
	}
	return true
}

// addIndent is MultiLineState.addIndent: a space of the content's own.
func (s *shapeScanner) addIndent(column int) {
	m := s.ml
	if m.firstLineIndentColumn == 0 || column < m.firstLineIndentColumn {
		return
	}
	if !m.isLiteral && m.foldedNewLine {
		m.foldedNewLine = false
	}
	s.buf = append(s.buf, ' ')
	s.notSpaceCharPos = len(s.buf)
}

// foldNewLine is MultiLineState.updateNewLineInFolded (what remains of a
// folded line break decides whether the content is empty).
func (s *shapeScanner) foldNewLine(column int) {
	m := s.ml
	if m.isLiteral || !m.foldedNewLine {
		return
	}
	var last, prevLast rune
	if n := len(s.buf); n > 0 {
		last = s.buf[n-1]
		if n > 1 {
			prevLast = s.buf[n-2]
		}
	}
	if m.lineIndentColumn == m.prevLineIndentColumn {
		if last == '\n' {
			s.buf[len(s.buf)-1] = ' '
		}
	} else if m.prevLineIndentColumn == 0 && m.lastNotSpaceOnlyLineIndentColumn == column {
		if last == '\n' && prevLast == '\n' {
			s.buf = s.buf[:len(s.buf)-1]
			s.notSpaceCharPos = len(s.buf)
		}
	}
	m.foldedNewLine = false
}
