package configs

// The indicators that make the lists and mappings: flow brackets and ",",
// "-", ":", "?", the merge key "<<", and what names or tags a node ("&",
// "*", "!").

// scanFlowStart is a "{" or "[": the library's scanFlowMapStart and
// scanFlowArrayStart.
func (s *shapeScanner) scanFlowStart(c rune) bool {
	st := &s.st
	if s.ctx.existsBuffer() && !st.isFlowMode() {
		return false
	}
	s.addBufferedTokenIfExists()
	s.ctx.addOriginBuf(c)
	s.addToken(otherToken, st.column)
	kind := flowSeq
	if c == '{' {
		kind = flowMap
		st.flowMapNum++
	} else {
		st.flowSeqNum++
	}
	s.tree.flowStart(kind, st.column, st.line, st.idx)
	st.progressColumn(1)
	s.ctx.clear()
	return true
}

// scanFlowEnd is a "}" or "]": the library's scanFlowMapEnd and
// scanFlowArrayEnd.
func (s *shapeScanner) scanFlowEnd(c rune) bool {
	st := &s.st
	num := &st.flowSeqNum
	if c == '}' {
		if st.flowMapNum <= 0 {
			return false
		}
		num = &st.flowMapNum
	} else if s.ctx.existsBuffer() && st.flowSeqNum <= 0 {
		return false
	}
	s.addBufferedTokenIfExists()
	s.ctx.addOriginBuf(c)
	s.addToken(otherToken, st.column)
	*num--
	s.tree.flowEnd()
	st.progressColumn(1)
	s.ctx.clear()
	return true
}

// scanFlowEntry is a "," in flow context.
func (s *shapeScanner) scanFlowEntry() bool {
	st := &s.st
	if !st.isFlowMode() {
		return false
	}
	s.addBufferedTokenIfExists()
	s.ctx.addOriginBuf(',')
	s.addToken(otherToken, st.column)
	s.tree.flowEntry()
	st.progressColumn(1)
	s.ctx.clear()
	return true
}

// scanSequence is a "-" that is no document marker: a list's entry, or a
// plain scalar folded over lines that start with "-" (the library's
// scanRawFoldedChar).
func (s *shapeScanner) scanSequence() (handled, ok bool) {
	st, ctx := &s.st, &s.ctx
	if ctx.existsBuffer() && st.indentState == indentUp {
		// A plain scalar folded over lines that start with "-".
		m := &multiLine{isRawFolded: true}
		m.updateIndentColumn(st.column)
		ctx.ml = m
		ctx.addBuf('-')
		ctx.addOriginBuf('-')
		st.progressColumn(1)
		return true, true
	}
	if ctx.existsBuffer() {
		return false, true
	}
	if nc := st.nextChar(); nc != 0 && nc != ' ' && nc != '\t' && !isNewLine(nc) {
		return false, true
	}
	if ctx.obufStartsWithTab() {
		st.progressColumn(1)
		return false, false
	}
	s.addBufferedTokenIfExists()
	ctx.addOriginBuf('-')
	s.addToken(otherToken, st.column)
	st.lastDelimColumn = st.column
	s.tree.seqEntry(st.column, st.idx)
	st.progressColumn(1)
	ctx.clear()
	return true, true
}

// scanMapDelim is a ":" that ends a key.
func (s *shapeScanner) scanMapDelim() (handled, ok bool) {
	st, ctx := &s.st, &s.ctx
	nc := st.nextChar()
	if st.isDirective || st.isAnchor || st.isAlias {
		return false, true
	}
	if st.flowMapNum <= 0 && nc != ' ' && nc != '\t' && !isNewLine(nc) && !st.isNextEOS() {
		return false, true
	}
	if st.flowMapNum > 0 && nc == '/' {
		return false, true
	}
	if st.flowMapNum > 0 && ctx.lastToken == mappingValueToken {
		return false, true
	}
	if ctx.obufStartsWithTab() && (len(ctx.buf) == 0 || ctx.buf[0] != '\t') {
		st.progressColumn(1)
		return false, false
	}
	if col, ok := s.addBufferedTokenIfExists(); ok {
		st.lastDelimColumn = col
	} else if ctx.lastToken == quotedToken {
		st.lastDelimColumn = ctx.lastTokenColumn
	}
	s.addToken(mappingValueToken, st.column)
	s.tree.mapValue(st.column, st.idx)
	st.progressColumn(1)
	ctx.clear()
	return true, true
}

// scanMapKey is a "?": an explicit key.
func (s *shapeScanner) scanMapKey() bool {
	st := &s.st
	if s.ctx.existsBuffer() {
		return false
	}
	if nc := st.nextChar(); nc != ' ' && nc != '\t' {
		return false
	}
	s.addToken(otherToken, st.column)
	st.lastDelimColumn = st.column
	s.tree.keyEntry(st.column, st.idx, false, s.tree.afterPrefix(), true, 0)
	st.progressColumn(1)
	s.ctx.clear()
	return true
}

// scanMergeKey is a "<<" before a ":".
func (s *shapeScanner) scanMergeKey() bool {
	st := &s.st
	run := st.repeatNum('<')
	s.meter.work(run, st.idx) // the library counts the run here (isMergeKey)
	if run != 2 || !st.mapDelimAfter(st.idx+2) {
		return false
	}
	st.lastDelimColumn = st.column
	s.addToken(otherToken, st.column)
	s.tree.nodeStart(st.column, st.line, false, len("<<"))
	st.progressColumn(2)
	s.ctx.clear()
	return true
}

// scanAnchorOrAlias is a "&" or a "*": the library's scanAnchor and
// scanAlias (the name is the token after it).
func (s *shapeScanner) scanAnchorOrAlias(c rune) bool {
	st := &s.st
	if s.ctx.existsBuffer() {
		return false
	}
	s.addBufferedTokenIfExists()
	s.ctx.addOriginBuf(c)
	s.addToken(otherToken, st.column)
	if c == '*' {
		s.tree.alias(st.column, st.line)
	} else {
		s.tree.anchor(st.column, st.line)
	}
	st.progressColumn(1)
	st.isAnchor, st.isAlias = st.isAnchor || c == '&', st.isAlias || c == '*'
	s.ctx.clear()
	return true
}

// scanTag skips a tag ("!name ") as the library does: it ends at a space,
// a line break or, in flow context, a ",", which the library reads again
// but for the space.
func (s *shapeScanner) scanTag() (handled, ok bool) {
	st := &s.st
	s.ctx.addOriginBuf('!')
	start := st.idx
	st.progress(1)
	progress := 0
	for i, c := range st.src[st.idx:] {
		progress = i + 1
		again := 1 // the character after the tag is read again
		switch c {
		case ' ':
			again = 0
		case ',':
			if !st.isFlowMode() {
				continue
			}
		case '\n', '\r':
		case '{', '}':
			st.progressColumn(progress)
			return false, false
		default:
			continue
		}
		end := st.idx + i
		s.addToken(otherToken, st.column)
		s.tree.prefix(st.column, st.line, tagGroups(string(st.src[start:end])), end-start)
		st.progressColumn(end - start - again)
		s.ctx.clear()
		return true, true
	}
	st.progressColumn(progress)
	s.ctx.clear()
	return true, true
}
