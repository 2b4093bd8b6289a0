package configs

// scanQuote skips a quoted scalar as the library does; !ok when the library
// finds it invalid (where it then goes on reading).
func (s *shapeScanner) scanQuote(q rune) bool {
	col, line, start := s.st.column, s.st.line, s.st.idx
	skip := quotedScan{st: &s.st, meter: &s.meter, quote: q}
	if !skip.skip() {
		return false
	}
	s.addToken(quotedToken, col)
	s.tree.nodeStart(col, line, true, s.st.idx-start)
	s.ctx.clear()
	return true
}

// quotedScan skips a quoted scalar as the library's scanSingleQuote and
// scanDoubleQuote do (scanner/scanner.go), moving the scan's position along:
// the library moves it in steps of its own, behind or ahead of the character
// being read.
type quotedScan struct {
	st    *scanState
	meter *shapeMeter // counts a tab's look to the end of its line
	quote rune        // "'" or '"'
}

// skip reads from the opening quote to the closing one; false where the
// library finds the scalar invalid: a document marker or a tab in its
// indentation, an escape it does not know, or no closing quote.
//
// firstLineChar: the character is in the indentation of a line after the
// first; afterBreak: a line break was just read, the position moved past it.
func (q *quotedScan) skip() bool {
	st, src := q.st, q.st.src
	firstLineChar, afterBreak := false, false
	for idx := st.idx + 1; idx < len(src); idx++ {
		if !afterBreak {
			st.progressColumn(1)
		} else {
			afterBreak = false
		}
		c := src[idx]
		switch {
		case isNewLine(c):
			firstLineChar, afterBreak = true, true
			if !q.lineBreak(idx) {
				return false
			}
		case firstLineChar && c == ' ':
		case firstLineChar && c == '\t':
			if st.lastDelimColumn >= st.column {
				return false
			}
		case q.quote == '\'':
			if c != '\'' {
				firstLineChar = false
				continue
			}
			if idx+1 < len(src) && src[idx+1] == '\'' { // a quote doubled is one quote
				idx++
				st.progressColumn(1)
				continue
			}
			st.progressColumn(1)
			return true
		case c == '\\':
			firstLineChar = false
			var lineBreak, ok bool
			if idx, lineBreak, ok = q.escape(idx); !ok {
				return false
			}
			if lineBreak {
				firstLineChar, afterBreak = true, true
			}
		case c == '\t':
			idx = q.tab(idx)
		case c == '"':
			st.progressColumn(1)
			return true
		default:
			firstLineChar = false
		}
	}
	st.progressColumn(1)
	return false
}

// lineBreak is a line break inside the scalar, at idx; false when a
// document marker starts the next line.
func (q *quotedScan) lineBreak(idx int) bool {
	q.st.progressLine()
	src := q.st.src
	return idx+1 >= len(src) || !foundDocumentSeparatorMarker(src[idx+1:])
}

// escape reads the escape sequence at idx ("\n", "\x41", "\u00e9", "\" and
// a line break…) as the library does and returns the index of its last
// character; lineBreak if it is an escaped line break, !ok where the
// library finds it invalid.
func (q *quotedScan) escape(idx int) (last int, lineBreak, ok bool) {
	st, src := q.st, q.st.src
	size := len(src)
	if idx+1 >= size {
		return idx, false, true
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
		if progress, ok = unicodeEscape(src, idx); !ok {
			return idx, false, false
		}
	case 'U':
		if idx+9 >= size {
			return idx, false, false
		}
		progress = 9
	case '\n':
		st.progressColumn(1)
		st.progressLine()
		return idx + 1, true, true
	case '\r':
		st.progressLine()
		progress, lineBreak = 1, true
		if idx+2 < size && src[idx+2] == '\n' {
			progress = 2
		}
	default:
		st.progressColumn(1)
		return idx, false, false
	}
	st.progressColumn(progress)
	return idx + progress, lineBreak, true
}

// unicodeEscape is how far the library moves past the "\u" escape at
// src[idx], a UTF-16 surrogate pair ("\ud83d\ude00") taken whole; !ok where
// it finds the escape invalid.
func unicodeEscape(src []rune, idx int) (progress int, ok bool) {
	size := len(src)
	if idx+5 >= size {
		return 0, false
	}
	progress = 5
	if code := hexRunes(src[idx+2 : idx+6]); code >= 0xD800 && code <= 0xDBFF {
		if idx+11 >= size || src[idx+6] != '\\' || src[idx+7] != 'u' {
			return 0, false
		}
		if low := hexRunes(src[idx+8 : idx+12]); low < 0xDC00 || low > 0xDFFF {
			return 0, false
		}
		progress += 6
	}
	return progress, true
}

// tab is a tab in double quotes, at idx; it returns the index of the last
// character read. The library looks at the rest of the line at each one: is
// there more than blanks? (work counts what that costs it.)
func (q *quotedScan) tab(idx int) (last int) {
	st := q.st
	eol, lastText := st.lineAfter(idx)
	q.meter.work(eol-idx, idx)
	if lastText > idx {
		if st.src[idx+1] != '"' {
			st.progressColumn(1)
		}
		return idx
	}
	st.progressColumn(eol - idx - 1)
	return eol - 1
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
