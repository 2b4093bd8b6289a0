package configs

import "strings"

// indentState is the library's IndentState: how a line's first character
// stands to the column of the latest delimiter.
type indentState uint8

const (
	indentEqual indentState = iota
	indentUp
	indentDown
	indentKeep
)

// scanState is the library's Scanner's own state (scanner/scanner.go), its
// Context apart: where it is in the text, the state of the line, and the
// flow brackets open.
type scanState struct {
	src               []rune
	idx               int // the library's sourcePos
	ctxStart          int // where the current Context began
	column            int
	line              int // as the library counts them
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
	saved             bool

	// The line lineAfter read last: [lineStart, lineEnd), its last text at
	// lineText; the run of one character repeatNum read last.
	lineStart, lineEnd, lineText int
	runStart, runEnd             int
}

func isNewLine(c rune) bool { return c == '\n' || c == '\r' }

func (st *scanState) previousChar() rune {
	if st.idx > st.ctxStart {
		return st.src[st.idx-1]
	}
	return 0
}

func (st *scanState) nextChar() rune {
	if st.idx+1 < len(st.src) {
		return st.src[st.idx+1]
	}
	return 0
}

func (st *scanState) isEOS() bool { return len(st.src)-1 <= st.idx }

func (st *scanState) isNextEOS() bool { return len(st.src) <= st.idx+1 }

// repeatNum is how many times r is repeated from the current character on.
// (The library counts the run at each of its characters; the scan reads each
// run once.)
func (st *scanState) repeatNum(r rune) int {
	if st.idx < st.runStart || st.idx >= st.runEnd || st.src[st.idx] != r {
		st.runStart, st.runEnd = st.idx, st.idx
		for st.runEnd < len(st.src) && st.src[st.runEnd] == r {
			st.runEnd++
		}
	}
	return st.runEnd - st.idx
}

func (st *scanState) progressColumn(n int) { st.column += n; st.idx += n }

func (st *scanState) progress(n int) { st.idx += n }

func (st *scanState) progressLine() {
	st.line++
	st.column = 1
	st.indentNum = 0
	st.isFirstCharAtLine = true
	st.isAnchor, st.isAlias, st.isDirective = false, false, false
	st.idx++
}

func (st *scanState) updateIndent(c rune) {
	if st.isFirstCharAtLine && isNewLine(c) {
		return
	}
	if st.isFirstCharAtLine && c == ' ' {
		st.indentNum++
		return
	}
	if st.isFirstCharAtLine && c == '\t' {
		return
	}
	if !st.isFirstCharAtLine {
		st.indentState = indentKeep
		return
	}
	if st.lastDelimColumn != 0 {
		if st.lastDelimColumn < st.column {
			st.indentState = indentUp
		} else {
			st.indentState = indentDown
		}
	}
	st.isFirstCharAtLine = false
}

func (st *scanState) isFlowMode() bool { return st.flowSeqNum > 0 || st.flowMapNum > 0 }

// lineAfter returns the end of the line holding src[i] (its line break, or
// the end of the text) and the index of its last character that is neither a
// space nor a tab (-1 if none), reading each line once however often asked.
func (st *scanState) lineAfter(i int) (eol, lastText int) {
	if i >= st.lineStart && i < st.lineEnd {
		return st.lineEnd, st.lineText
	}
	st.lineStart, st.lineText = i, -1
	for st.lineEnd = i; st.lineEnd < len(st.src) && !isNewLine(st.src[st.lineEnd]); st.lineEnd++ {
		if c := st.src[st.lineEnd]; c != ' ' && c != '\t' {
			st.lineText = st.lineEnd
		}
	}
	return st.lineEnd, st.lineText
}

// foundDocumentSeparatorMarker: src starts with "---" or "...", alone or
// before a blank or a line break.
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

// documentMarkerAt: a "---" (c is '-') or "..." starts the line at the
// current character, "---" alone or before a blank or a line break.
func (st *scanState) documentMarkerAt(c rune) bool {
	if st.indentNum != 0 || st.column != 1 || st.repeatNum(c) != 3 {
		return false
	}
	if c == '-' && st.idx+3 < len(st.src) {
		if n := st.src[st.idx+3]; n != ' ' && n != '\t' && !isNewLine(n) {
			return false
		}
	}
	return true
}

// mapDelimAfter: after src[i:]'s spaces, a ":" before a space or a line
// break (the library's isMergeKey).
func (st *scanState) mapDelimAfter(i int) bool {
	for ; i < len(st.src); i++ {
		c := st.src[i]
		if c == ' ' {
			continue
		}
		if c != ':' {
			return false
		}
		if i+1 < len(st.src) {
			if nc := st.src[i+1]; nc == ' ' || isNewLine(nc) {
				return true
			}
		}
	}
	return false
}

// scanTab is a tab outside quoted and block scalars: indentation (in plain
// text too), text in flow context or after the line's first character, and
// else an invalid token (the library's scanTab).
func (st *scanState) scanTab(ctx *scanContext, c rune) (handled, ok bool) {
	if ctx.existsBuffer() && st.lastDelimColumn == 0 || st.lastDelimColumn < st.column {
		st.indentNum++
		ctx.addOriginBuf(c)
		st.progress(1)
		return true, true
	}
	if st.isFlowMode() || !st.isFirstCharAtLine {
		return false, true
	}
	return st.invalidChar(ctx, c)
}

// invalidChar is a character that cannot start a token here ("@", "`", a
// tab): the library's invalid token, after which it reads on afresh.
func (st *scanState) invalidChar(ctx *scanContext, c rune) (handled, ok bool) {
	ctx.addBuf(c)
	ctx.addOriginBuf(c)
	st.progressColumn(1)
	ctx.clear()
	return false, false
}
