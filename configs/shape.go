package configs

import (
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

// shapeScanner reads src as the library's scanner does.
type shapeScanner struct {
	st  scanState   // the library's Scanner: where it is in the text, the line's state
	ctx scanContext // the library's Context, started afresh after each invalid token (newContext)

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
	s := &shapeScanner{
		st:    scanState{src: []rune(string(data)), column: 1, line: 1, isFirstCharAtLine: true},
		meter: shapeMeter{caps: caps},
	}
	s.tree = newShapeParser(&s.meter)
	for s.st.idx < len(s.st.src) && s.meter.limit == nil {
		// lexer.Tokenize: Scan until the end, each time with a new Context.
		s.st.ctxStart = s.st.idx
		s.ctx.reset()
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

func (s *shapeScanner) addToken(kind tokenKind, col int) {
	s.tree.token(s.st.idx, false)
	s.ctx.lastToken, s.ctx.lastTokenColumn = kind, col
}

// bufferedToken makes a token of the buffer, if it holds anything, and
// returns its column.
func (s *shapeScanner) bufferedToken() (col int, ok bool) {
	col, line := s.st.column-len(s.ctx.buf), s.st.line
	if s.ctx.ml != nil {
		col = strings.Index(string(s.ctx.obuf), string(s.ctx.buf)) + 1
	}
	if s.st.saved {
		col, line = s.st.savedColumn, s.st.savedLine
		s.st.saved = false
	}
	if s.st.idx == s.st.ctxStart {
		return 0, false
	}
	length := len(s.ctx.bufferedSrc())
	if length == 0 {
		s.ctx.buf = s.ctx.buf[:0]
		return 0, false
	}
	kind := otherToken
	if s.ctx.ml != nil {
		kind = stringToken
	}
	s.tree.token(s.st.idx, true)
	s.ctx.lastToken, s.ctx.lastTokenColumn = kind, col
	if s.ctx.ml == nil || s.ctx.ml.isRawFolded {
		s.tree.nodeStart(col, line, true, length) // a plain scalar
	}
	s.ctx.resetBuffer()
	return col, true
}

func (s *shapeScanner) addBufferedTokenIfExists() { s.bufferedToken() }

// scan is the library's Scanner.scan: it returns at the end of the text, at
// an invalid token, or when a limit is crossed.
func (s *shapeScanner) scan() {
	for s.st.idx < len(s.st.src) && s.meter.limit == nil {
		c := s.st.src[s.st.idx]
		s.st.updateIndent(c)
		if s.st.indentState == indentDown {
			s.addBufferedTokenIfExists()
		}
		if m := s.ctx.ml; m != nil {
			if s.st.indentState == indentDown {
				// The block ends here: the library reads this character
				// again outside it (after an invalid token when the block
				// had no content at column 1: the same for what follows).
				if s.ctx.lastToken != noToken && s.ctx.lastTokenColumn == 1 {
					s.meter.uncounted() // "could not find multi-line content"
					return
				}
				if s.ctx.lastToken != noToken && s.ctx.lastToken != stringToken {
					s.addToken(stringToken, s.st.column) // the empty content's token
				}
				s.ctx.ml = nil
			} else {
				if !m.scan(s, c) {
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
		s.ctx.addBuf(c)
		s.ctx.addOriginBuf(c)
		s.st.progressColumn(1)
	}
	s.addBufferedTokenIfExists()
}

// scanChar is the switch of the library's scan loop: handled when c began or
// ended a token, !ok at an invalid token.
func (s *shapeScanner) scanChar(c rune) (handled, ok bool) {
	switch c {
	case '{':
		if s.ctx.existsBuffer() && !s.st.isFlowMode() {
			return false, true
		}
		s.flowStart(flowMap)
		return true, true
	case '}':
		if s.st.flowMapNum <= 0 {
			return false, true
		}
		s.flowEnd(&s.st.flowMapNum)
		return true, true
	case '[':
		if s.ctx.existsBuffer() && !s.st.isFlowMode() {
			return false, true
		}
		s.flowStart(flowSeq)
		return true, true
	case ']':
		if s.ctx.existsBuffer() && s.st.flowSeqNum <= 0 {
			return false, true
		}
		s.flowEnd(&s.st.flowSeqNum)
		return true, true
	case ',':
		if !s.st.isFlowMode() {
			return false, true
		}
		s.addBufferedTokenIfExists()
		s.ctx.addOriginBuf(c)
		s.addToken(otherToken, s.st.column)
		s.tree.flowEntry()
		s.st.progressColumn(1)
		s.ctx.clear()
		return true, true
	case '.':
		if s.st.indentNum != 0 || s.st.column != 1 || s.st.repeatNum('.') != 3 {
			return false, true
		}
		s.addBufferedTokenIfExists()
		s.addToken(otherToken, s.st.column)
		s.st.progressColumn(3)
		s.ctx.clear()
		return true, true
	case '<':
		if !s.isMergeKey() {
			return false, true
		}
		s.st.lastDelimColumn = s.st.column
		s.addToken(otherToken, s.st.column)
		s.tree.nodeStart(s.st.column, s.st.line, false, len("<<"))
		s.st.progressColumn(2)
		s.ctx.clear()
		return true, true
	case '-':
		if s.scanDocumentStart() {
			return true, true
		}
		if s.ctx.existsBuffer() && s.st.indentState == indentUp {
			// A plain scalar folded over lines that start with "-".
			m := &multiLine{isRawFolded: true}
			m.updateIndentColumn(s.st.column)
			s.ctx.ml = m
			s.ctx.addBuf('-')
			s.ctx.addOriginBuf('-')
			s.st.progressColumn(1)
			return true, true
		}
		if s.ctx.existsBuffer() {
			return false, true
		}
		if nc := s.st.nextChar(); nc != 0 && nc != ' ' && nc != '\t' && !isNewLine(nc) {
			return false, true
		}
		if s.ctx.obufStartsWithTab() {
			s.st.progressColumn(1)
			return false, false
		}
		s.addBufferedTokenIfExists()
		s.ctx.addOriginBuf('-')
		s.addToken(otherToken, s.st.column)
		s.st.lastDelimColumn = s.st.column
		s.tree.seqEntry(s.st.column, s.st.idx)
		s.st.progressColumn(1)
		s.ctx.clear()
		return true, true
	case ':':
		return s.scanMapDelim()
	case '|', '>':
		if s.ctx.existsBuffer() {
			return false, true
		}
		return true, s.scanMultiLineHeader()
	case '!':
		if s.ctx.existsBuffer() || s.st.isDirective {
			return false, true
		}
		return s.scanTag()
	case '%':
		if s.ctx.existsBuffer() || s.st.indentNum != 0 {
			return false, true
		}
		s.addBufferedTokenIfExists()
		s.ctx.addOriginBuf('%')
		s.addToken(otherToken, s.st.column)
		s.st.progressColumn(1)
		s.ctx.clear()
		s.st.isDirective = true
		return true, true
	case '?':
		if s.ctx.existsBuffer() {
			return false, true
		}
		if nc := s.st.nextChar(); nc != ' ' && nc != '\t' {
			return false, true
		}
		s.addToken(otherToken, s.st.column)
		s.st.lastDelimColumn = s.st.column
		s.tree.keyEntry(s.st.column, s.st.idx, false, s.tree.afterPrefix(), true, 0)
		s.st.progressColumn(1)
		s.ctx.clear()
		return true, true
	case '&', '*':
		if s.ctx.existsBuffer() {
			return false, true
		}
		s.addBufferedTokenIfExists()
		s.ctx.addOriginBuf(c)
		s.addToken(otherToken, s.st.column)
		if c == '*' {
			s.tree.alias(s.st.column, s.st.line)
		} else {
			s.tree.anchor(s.st.column, s.st.line)
		}
		s.st.progressColumn(1)
		s.st.isAnchor, s.st.isAlias = s.st.isAnchor || c == '&', s.st.isAlias || c == '*'
		s.ctx.clear()
		return true, true
	case '#':
		return s.scanComment(), true
	case '\'', '"':
		if s.ctx.existsBuffer() {
			return false, true
		}
		return true, s.scanQuote(c)
	case '\r', '\n':
		s.scanNewLine(c)
		return true, true
	case ' ':
		return s.scanWhiteSpace(), true
	case '@', '`':
		if s.ctx.existsBuffer() {
			return false, true
		}
		s.ctx.addBuf(c)
		s.ctx.addOriginBuf(c)
		s.st.progressColumn(1)
		s.ctx.clear()
		return false, false
	case '\t':
		if s.ctx.existsBuffer() && s.st.lastDelimColumn == 0 || s.st.lastDelimColumn < s.st.column {
			s.st.indentNum++
			s.ctx.addOriginBuf(c)
			s.st.progress(1)
			return true, true
		}
		if s.st.isFlowMode() || !s.st.isFirstCharAtLine {
			return false, true
		}
		s.ctx.addBuf(c)
		s.ctx.addOriginBuf(c)
		s.st.progressColumn(1)
		s.ctx.clear()
		return false, false
	}
	return false, true
}

func (s *shapeScanner) flowStart(kind levelKind) {
	s.addBufferedTokenIfExists()
	s.ctx.addOriginBuf(s.st.src[s.st.idx])
	s.addToken(otherToken, s.st.column)
	if kind == flowMap {
		s.st.flowMapNum++
	} else {
		s.st.flowSeqNum++
	}
	s.tree.flowStart(kind, s.st.column, s.st.line, s.st.idx)
	s.st.progressColumn(1)
	s.ctx.clear()
}

func (s *shapeScanner) flowEnd(num *int) {
	s.addBufferedTokenIfExists()
	s.ctx.addOriginBuf(s.st.src[s.st.idx])
	s.addToken(otherToken, s.st.column)
	*num--
	s.tree.flowEnd()
	s.st.progressColumn(1)
	s.ctx.clear()
}

func (s *shapeScanner) isMergeKey() bool {
	run := s.st.repeatNum('<')
	s.meter.work(run, s.st.idx) // the library counts the run here
	if run != 2 {
		return false
	}
	for i := s.st.idx + 2; i < len(s.st.src); i++ {
		c := s.st.src[i]
		if c == ' ' {
			continue
		}
		if c != ':' {
			return false
		}
		if i+1 < len(s.st.src) {
			if nc := s.st.src[i+1]; nc == ' ' || isNewLine(nc) {
				return true
			}
		}
	}
	return false
}

func (s *shapeScanner) scanDocumentStart() bool {
	if s.st.indentNum != 0 || s.st.column != 1 || s.st.repeatNum('-') != 3 {
		return false
	}
	if s.st.idx+3 < len(s.st.src) {
		if c := s.st.src[s.st.idx+3]; c != ' ' && c != '\t' && !isNewLine(c) {
			return false
		}
	}
	s.addBufferedTokenIfExists()
	s.addToken(otherToken, s.st.column)
	s.st.progressColumn(3)
	s.ctx.clear()
	s.st.lastDelimColumn, s.st.indentNum = 0, 0
	s.tree.documentStart()
	return true
}

func (s *shapeScanner) scanMapDelim() (handled, ok bool) {
	nc := s.st.nextChar()
	if s.st.isDirective || s.st.isAnchor || s.st.isAlias {
		return false, true
	}
	if s.st.flowMapNum <= 0 && nc != ' ' && nc != '\t' && !isNewLine(nc) && !s.st.isNextEOS() {
		return false, true
	}
	if s.st.flowMapNum > 0 && nc == '/' {
		return false, true
	}
	if s.st.flowMapNum > 0 && s.ctx.lastToken == mappingValueToken {
		return false, true
	}
	if s.ctx.obufStartsWithTab() && (len(s.ctx.buf) == 0 || s.ctx.buf[0] != '\t') {
		s.st.progressColumn(1)
		return false, false
	}
	if col, ok := s.bufferedToken(); ok {
		s.st.lastDelimColumn = col
	} else if s.ctx.lastToken == quotedToken {
		s.st.lastDelimColumn = s.ctx.lastTokenColumn
	}
	s.addToken(mappingValueToken, s.st.column)
	s.tree.mapValue(s.st.column, s.st.idx)
	s.st.progressColumn(1)
	s.ctx.clear()
	return true, true
}

func (s *shapeScanner) scanComment() bool {
	if s.ctx.existsBuffer() {
		if c := s.st.previousChar(); c != ' ' && c != '\t' && !isNewLine(c) {
			return false
		}
	}
	s.addBufferedTokenIfExists()
	s.meter.uncounted()
	s.ctx.lastToken, s.ctx.lastTokenColumn = otherToken, s.st.column
	s.st.progress(1) // the '#'
	for i := s.st.idx; i < len(s.st.src); i++ {
		if isNewLine(s.st.src[i]) {
			s.st.progressColumn(i - s.st.idx)
			s.st.progressLine()
			s.ctx.clear()
			return true
		}
	}
	s.st.progressColumn(len(s.st.src) - s.st.idx)
	s.st.progressLine()
	s.ctx.clear()
	return true
}

func (s *shapeScanner) scanNewLine(c rune) {
	if len(s.ctx.buf) > 0 && !s.st.saved {
		s.st.saved, s.st.savedColumn, s.st.savedLine = true, s.st.column-len(s.ctx.bufferedSrc()), s.st.line
	}
	s.ctx.removeRightSpaceFromBuf()
	if c == '\r' && s.st.nextChar() == '\n' {
		s.ctx.addOriginBuf('\r')
		s.st.progress(1)
		c = '\n'
	}
	if s.st.isEOS() || s.st.isAnchor || s.st.isAlias || s.st.isDirective {
		s.addBufferedTokenIfExists()
	}
	if s.ctx.existsBuffer() && s.st.isFirstCharAtLine {
		if s.ctx.buf[len(s.ctx.buf)-1] == ' ' {
			s.ctx.buf[len(s.ctx.buf)-1] = '\n'
		} else {
			s.ctx.buf = append(s.ctx.buf, '\n')
		}
	} else {
		s.ctx.addBuf(' ')
	}
	s.ctx.addOriginBuf(c)
	s.st.progressLine()
}

func (s *shapeScanner) scanWhiteSpace() bool {
	if !s.st.isAnchor && !s.st.isDirective && !s.st.isAlias && !s.st.isFirstCharAtLine {
		return false
	}
	if s.st.isFirstCharAtLine {
		s.st.progressColumn(1)
		s.ctx.addOriginBuf(' ')
		return true
	}
	if s.st.isDirective {
		s.addBufferedTokenIfExists()
		s.st.progressColumn(1)
		s.ctx.addOriginBuf(' ')
		return true
	}
	s.addBufferedTokenIfExists()
	s.st.isAnchor, s.st.isAlias = false, false
	return true
}

// scanTag skips a tag ("!name ") as the library does.
func (s *shapeScanner) scanTag() (handled, ok bool) {
	s.ctx.addOriginBuf('!')
	start := s.st.idx
	s.st.progress(1)
	progress := 0
	for i, c := range s.st.src[s.st.idx:] {
		progress = i + 1
		switch c {
		case ' ':
			s.addToken(otherToken, s.st.column)
			s.tree.prefix(s.st.column, s.st.line, tagGroups(string(s.st.src[start:s.st.idx+i])), s.st.idx+i-start)
			s.st.progressColumn(s.st.idx + i - start)
			s.ctx.clear()
			return true, true
		case ',':
			if s.st.isFlowMode() {
				s.addToken(otherToken, s.st.column)
				s.tree.prefix(s.st.column, s.st.line, tagGroups(string(s.st.src[start:s.st.idx+i])), s.st.idx+i-start)
				s.st.progressColumn(s.st.idx + i - start - 1)
				s.ctx.clear()
				return true, true
			}
		case '\n', '\r':
			s.addToken(otherToken, s.st.column)
			s.tree.prefix(s.st.column, s.st.line, tagGroups(string(s.st.src[start:s.st.idx+i])), s.st.idx+i-start)
			s.st.progressColumn(s.st.idx + i - start - 1)
			s.ctx.clear()
			return true, true
		case '{', '}':
			s.st.progressColumn(progress)
			return false, false
		}
	}
	s.st.progressColumn(progress)
	s.ctx.clear()
	return true, true
}
