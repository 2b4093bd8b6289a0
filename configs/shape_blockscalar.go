package configs

import (
	"slices"
	"strconv"
	"strings"
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

// scanMultiLineHeader reads a block scalar's header ("|", ">-", "|2 # …")
// and starts the block, as the library does.
func (s *shapeScanner) scanMultiLineHeader() bool {
	st := &s.st
	header := st.src[st.idx]
	s.ctx.addOriginBuf(header)
	st.progress(1)
	progress, opt, comment := blockHeader(st.src[st.idx:])
	if opt != "" && !validBlockHeaderOption(opt) {
		st.progressColumn(progress)
		return false
	}
	if st.column == 1 {
		st.lastDelimColumn = 1
	}
	s.addToken(otherToken, st.column)
	s.tree.nodeStart(st.column, st.line, true, 0)
	if comment >= 0 {
		s.meter.uncounted() // the comment after the header
		s.ctx.lastTokenColumn = st.column + 1 + comment
	}
	m := &multiLine{isLiteral: header == '|', opt: opt}
	if indent := blockIndentOption(opt); indent > 0 {
		m.firstLineIndentColumn = st.lastDelimColumn + indent
	}
	s.ctx.ml = m
	st.indentState = indentKeep
	s.ctx.resetBuffer()
	st.progressColumn(progress)
	st.progressLine()
	return true
}

// blockHeader reads the rest of a block scalar's header line, rest being the
// text after its "|" or ">", as the library does: progress is how far it
// moves, to the line break; opt the header's options ("-", "+", "2-"…);
// comment the index in rest of a "#" (-1 if none).
func blockHeader(rest []rune) (progress int, opt string, comment int) {
	crlf := false
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
	opt = value
	if i := strings.Index(value, "#"); i > 0 {
		opt = value[:i]
	}
	opt = strings.TrimRight(opt, " \t")
	return progress, opt, slices.Index(rest[:min(progress+1, len(rest))], '#')
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

// scan is one character inside a block scalar, the library's
// Scanner.scanMultiLine; false at an invalid token.
func (m *multiLine) scan(s *shapeScanner, c rune) bool {
	st, ctx := &s.st, &s.ctx
	ctx.addOriginBuf(c)
	if c == '\r' {
		if st.nextChar() == '\n' {
			ctx.addOriginBuf('\n')
			st.progress(1)
		}
		c = '\n'
	}
	switch {
	case st.isEOS():
		if st.isFirstCharAtLine && c == ' ' {
			m.addIndent(ctx, st.column)
		} else {
			ctx.addBuf(c)
		}
		m.updateIndentColumn(st.column)
		if !m.validIndentColumn() {
			st.progressColumn(1)
			return false
		}
		s.addToken(stringToken, st.column)
		ctx.clear()
		st.progressColumn(1)
	case isNewLine(c):
		ctx.addBuf(c)
		m.newLine(st.column)
		st.progressLine()
		if st.idx < len(st.src) && foundDocumentSeparatorMarker(st.src[st.idx:]) {
			s.addToken(stringToken, st.column)
			ctx.clear()
		}
	case st.isFirstCharAtLine && c == ' ':
		m.addIndent(ctx, st.column)
		st.progressColumn(1)
	case st.isFirstCharAtLine && c == '\t' && m.isIndentColumn(st.column):
		st.progressColumn(1)
		return false
	case c == '\t' && !m.isIndentColumn(st.column):
		ctx.addBufWithTab(c)
		st.progressColumn(1)
	default:
		if !m.text(st.column) {
			st.progressColumn(1)
			return false
		}
		if m.firstLineIndentColumn > 1 {
			st.lastDelimColumn = m.firstLineIndentColumn - 1
		}
		m.foldNewLine(ctx, st.column)
		ctx.addBufWithTab(c)
		st.progressColumn(1)
	}
	return true
}

// newLine is a line break at column: the library's
// updateSpaceOnlyIndentColumn and updateNewLineState.
func (m *multiLine) newLine(column int) {
	if m.firstLineIndentColumn == 0 {
		m.spaceOnlyIndentColumn = column - 1
	}
	m.prevLineIndentColumn = m.lineIndentColumn
	if m.lineIndentColumn != 0 {
		m.lastNotSpaceOnlyLineIndentColumn = m.lineIndentColumn
	}
	m.foldedNewLine = true
	m.lineIndentColumn = 0
}

// text is the content's text at column: the library's
// validateIndentAfterSpaceOnly, updateIndentColumn and validateIndentColumn;
// false where it finds the indentation invalid.
func (m *multiLine) text(column int) bool {
	if m.firstLineIndentColumn == 0 && m.spaceOnlyIndentColumn > column {
		return false
	}
	m.updateIndentColumn(column)
	return m.validIndentColumn()
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

// addIndent is MultiLineState.addIndent: a space of the content's own.
func (m *multiLine) addIndent(ctx *scanContext, column int) {
	if m.firstLineIndentColumn == 0 || column < m.firstLineIndentColumn {
		return
	}
	if !m.isLiteral && m.foldedNewLine {
		m.foldedNewLine = false
	}
	ctx.buf = append(ctx.buf, ' ')
	ctx.notSpaceCharPos = len(ctx.buf)
}

// foldNewLine is MultiLineState.updateNewLineInFolded (what remains of a
// folded line break decides whether the content is empty).
func (m *multiLine) foldNewLine(ctx *scanContext, column int) {
	if m.isLiteral || !m.foldedNewLine {
		return
	}
	var last, prevLast rune
	if n := len(ctx.buf); n > 0 {
		last = ctx.buf[n-1]
		if n > 1 {
			prevLast = ctx.buf[n-2]
		}
	}
	if m.lineIndentColumn == m.prevLineIndentColumn {
		if last == '\n' {
			ctx.buf[len(ctx.buf)-1] = ' '
		}
	} else if m.prevLineIndentColumn == 0 && m.lastNotSpaceOnlyLineIndentColumn == column {
		if last == '\n' && prevLast == '\n' {
			ctx.buf = ctx.buf[:len(ctx.buf)-1]
			ctx.notSpaceCharPos = len(ctx.buf)
		}
	}
	m.foldedNewLine = false
}
