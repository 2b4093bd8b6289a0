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
// the library moves it in steps of its own, behind or ahead of idx, the
// character being read.
type quotedScan struct {
	st            *scanState
	meter         *shapeMeter // counts a tab's look to the end of its line
	quote         rune        // "'" or '"'
	idx           int         // the character being read
	firstLineChar bool        // it is in the indentation of a line after the first
	afterBreak    bool        // a line break was just read, the position moved past it
}

// skip reads from the opening quote to the closing one; false where the
// library finds the scalar invalid: a document marker or a tab in its
// indentation, an escape it does not know, or no closing quote.
func (q *quotedScan) skip() bool {
	src := q.st.src
	for q.idx = q.st.idx + 1; q.idx < len(src); q.idx++ {
		if !q.afterBreak {
			q.st.progressColumn(1)
		} else {
			q.afterBreak = false
		}
		c := src[q.idx]
		switch {
		case isNewLine(c):
			if !q.lineBreak() {
				return false
			}
		case q.firstLineChar && c == ' ':
		case q.firstLineChar && c == '\t':
			if q.st.lastDelimColumn >= q.st.column {
				return false
			}
		case q.quote == '\'':
			if q.singleQuoted(c) {
				return true
			}
		default:
			if end, ok := q.doubleQuoted(c); end {
				return ok
			}
		}
	}
	q.st.progressColumn(1)
	return false
}

// lineBreak is a line break inside the scalar; false when a document marker
// starts the next line.
func (q *quotedScan) lineBreak() bool {
	q.firstLineChar, q.afterBreak = true, true
	q.st.progressLine()
	src := q.st.src
	return q.idx+1 >= len(src) || !foundDocumentSeparatorMarker(src[q.idx+1:])
}

// singleQuoted reads c in single quotes: true at the closing quote (a quote
// doubled is one quote).
func (q *quotedScan) singleQuoted(c rune) (end bool) {
	if c != '\'' {
		q.firstLineChar = false
		return false
	}
	if src := q.st.src; q.idx+1 < len(src) && src[q.idx+1] == '\'' {
		q.idx++
		q.st.progressColumn(1)
		return false
	}
	q.st.progressColumn(1)
	return true
}

// doubleQuoted reads c in double quotes: end at the closing quote (ok) or at
// an escape the library finds invalid.
func (q *quotedScan) doubleQuoted(c rune) (end, ok bool) {
	switch c {
	case '\\':
		q.firstLineChar = false
		if !q.escape() {
			return true, false
		}
	case '\t':
		q.tab()
	case '"':
		q.st.progressColumn(1)
		return true, true
	default:
		q.firstLineChar = false
	}
	return false, false
}

// escape reads the escape sequence at idx ("\n", "\x41", "\u00e9", "\" and a
// line break…) as the library does; false where the library finds it
// invalid.
func (q *quotedScan) escape() bool {
	src, idx := q.st.src, q.idx
	size := len(src)
	if idx+1 >= size {
		return true
	}
	progress, ok := 0, true
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
			return false
		}
	case 'U':
		if idx+9 >= size {
			return false
		}
		progress = 9
	case '\n':
		q.firstLineChar, q.afterBreak = true, true
		q.st.progressColumn(1)
		q.st.progressLine()
		q.idx++
		return true
	case '\r':
		q.firstLineChar, q.afterBreak = true, true
		q.st.progressLine()
		progress = 1
		if idx+2 < size && src[idx+2] == '\n' {
			progress = 2
		}
	default:
		q.st.progressColumn(1)
		return false
	}
	q.idx += progress
	q.st.progressColumn(progress)
	return true
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

// tab is a tab in double quotes. The library looks at the rest of the line
// at each one: is there more than blanks? (work counts what that costs it.)
func (q *quotedScan) tab() {
	idx := q.idx
	eol, lastText := q.st.lineAfter(idx)
	q.meter.work(eol-idx, idx)
	if lastText > idx {
		if q.st.src[idx+1] != '"' {
			q.st.progressColumn(1)
		}
		return
	}
	q.idx += eol - idx - 1
	q.st.progressColumn(eol - idx - 1)
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
