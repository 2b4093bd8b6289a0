package configs

import "strings"

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
	case '{', '[':
		return s.scanFlowStart(c), true
	case '}', ']':
		return s.scanFlowEnd(c), true
	case ',':
		return s.scanFlowEntry(), true
	case '.':
		return s.scanDocumentMarker(c), true
	case '<':
		return s.scanMergeKey(), true
	case '-':
		if s.scanDocumentMarker(c) {
			return true, true
		}
		return s.scanSequence()
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
		return s.scanDirective(), true
	case '?':
		return s.scanMapKey(), true
	case '&', '*':
		return s.scanAnchorOrAlias(c), true
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
		return s.st.invalidChar(&s.ctx, c)
	case '\t':
		return s.st.scanTab(&s.ctx, c)
	}
	return false, true
}

// addToken counts a token of kind at column col, at the current character.
func (s *shapeScanner) addToken(kind tokenKind, col int) {
	s.tree.token(s.st.idx, false)
	s.ctx.lastToken, s.ctx.lastTokenColumn = kind, col
}

// addBufferedTokenIfExists makes a token of the buffer, if it holds
// anything, and returns its column.
func (s *shapeScanner) addBufferedTokenIfExists() (col int, ok bool) {
	st, ctx := &s.st, &s.ctx
	col, line := st.column-len(ctx.buf), st.line
	if ctx.ml != nil {
		col = strings.Index(string(ctx.obuf), string(ctx.buf)) + 1
	}
	if st.saved {
		col, line = st.savedColumn, st.savedLine
		st.saved = false
	}
	if st.idx == st.ctxStart {
		return 0, false
	}
	length := len(ctx.bufferedSrc())
	if length == 0 {
		ctx.buf = ctx.buf[:0]
		return 0, false
	}
	kind := otherToken
	if ctx.ml != nil {
		kind = stringToken
	}
	s.tree.token(st.idx, true)
	ctx.lastToken, ctx.lastTokenColumn = kind, col
	if ctx.ml == nil || ctx.ml.isRawFolded {
		s.tree.nodeStart(col, line, true, length) // a plain scalar
	}
	ctx.resetBuffer()
	return col, true
}

// scanNewLine is a line break outside quoted and block scalars: in a plain
// scalar, a space or a line break of its own.
func (s *shapeScanner) scanNewLine(c rune) {
	st, ctx := &s.st, &s.ctx
	if len(ctx.buf) > 0 && !st.saved {
		st.saved, st.savedColumn, st.savedLine = true, st.column-len(ctx.bufferedSrc()), st.line
	}
	ctx.removeRightSpaceFromBuf()
	if c == '\r' && st.nextChar() == '\n' {
		ctx.addOriginBuf('\r')
		st.progress(1)
		c = '\n'
	}
	if st.isEOS() || st.isAnchor || st.isAlias || st.isDirective {
		s.addBufferedTokenIfExists()
	}
	if ctx.existsBuffer() && st.isFirstCharAtLine {
		if ctx.buf[len(ctx.buf)-1] == ' ' {
			ctx.buf[len(ctx.buf)-1] = '\n'
		} else {
			ctx.buf = append(ctx.buf, '\n')
		}
	} else {
		ctx.addBuf(' ')
	}
	ctx.addOriginBuf(c)
	st.progressLine()
}

// scanWhiteSpace is a space: indentation, or the end of an anchor's, alias's
// or directive's name.
func (s *shapeScanner) scanWhiteSpace() bool {
	st := &s.st
	if !st.isAnchor && !st.isDirective && !st.isAlias && !st.isFirstCharAtLine {
		return false
	}
	if st.isFirstCharAtLine {
		st.progressColumn(1)
		s.ctx.addOriginBuf(' ')
		return true
	}
	if st.isDirective {
		s.addBufferedTokenIfExists()
		st.progressColumn(1)
		s.ctx.addOriginBuf(' ')
		return true
	}
	s.addBufferedTokenIfExists()
	st.isAnchor, st.isAlias = false, false
	return true
}

// scanComment skips a comment, "#" to the end of its line, where one can
// start.
func (s *shapeScanner) scanComment() bool {
	st := &s.st
	if s.ctx.existsBuffer() {
		if c := st.previousChar(); c != ' ' && c != '\t' && !isNewLine(c) {
			return false
		}
	}
	s.addBufferedTokenIfExists()
	s.meter.uncounted()
	s.ctx.lastToken, s.ctx.lastTokenColumn = otherToken, st.column
	st.progress(1) // the '#'
	eol := st.idx
	for eol < len(st.src) && !isNewLine(st.src[eol]) {
		eol++
	}
	st.progressColumn(eol - st.idx)
	st.progressLine()
	s.ctx.clear()
	return true
}

// scanDocumentMarker is a "---" (c is '-') or a "..." at the start of a
// line: the library's scanDocumentStart and scanDocumentEnd.
func (s *shapeScanner) scanDocumentMarker(c rune) bool {
	st := &s.st
	if !st.documentMarkerAt(c) {
		return false
	}
	s.addBufferedTokenIfExists()
	s.addToken(otherToken, st.column)
	st.progressColumn(3)
	s.ctx.clear()
	if c == '-' {
		st.lastDelimColumn, st.indentNum = 0, 0 // the library's clearState
		s.tree.documentStart()
	}
	return true
}

// scanDirective is a "%" at the start of a line ("%YAML 1.2").
func (s *shapeScanner) scanDirective() bool {
	st := &s.st
	if s.ctx.existsBuffer() || st.indentNum != 0 {
		return false
	}
	s.addBufferedTokenIfExists()
	s.ctx.addOriginBuf('%')
	s.addToken(otherToken, st.column)
	st.progressColumn(1)
	s.ctx.clear()
	st.isDirective = true
	return true
}
