package configs

// levelKind is the kind of a list or mapping open at a point of the file.
type levelKind uint8

const (
	flowSeq levelKind = iota
	flowMap
	blockSeq
	blockMap
)

func (k levelKind) flow() bool { return k == flowSeq || k == flowMap }

// level is a list or mapping open at a point of the file: a flow one from its
// bracket to the bracket that closes it, a block one while lines start right of
// col, the column of its "-", "?" or first key.
type level struct {
	kind  levelKind
	col   int
	entry int // nodes counted at its latest "-", ":" or "?"
	// base is how long the parser's path of the list or mapping is ("$",
	// ".key", "[12]" for each level above); keyLen how long its latest key.
	base, keyLen int
	// explicit: the latest entry is a "?", whose key (the next node)
	// is not its value.
	explicit bool
}

// entryPath is how long the parser's path of l's latest entry is: a key
// after a ".", or an index ("[9999]": a file holds fewer than MaxNodes).
func (l *level) entryPath() int {
	if l.kind == flowSeq || l.kind == blockSeq {
		return l.base + len("[9999]")
	}
	return l.base + len(".") + l.keyLen
}

// awaits: the latest "-" or key of a level has no value yet when no node
// started after it (but, for a "?", its key), lastStart and prevStart being
// the latest two starts before the entry in question.
func (l *level) awaits(lastStart, prevStart int) bool {
	return lastStart <= l.entry || l.explicit && prevStart <= l.entry
}

// levels is the stack of lists and mappings open at a point of the file,
// the innermost last.
type levels struct {
	open []level
}

// push opens a level of kind at column col, entry being the nodes counted
// so far, in the latest entry of the innermost level; it returns how many
// are open.
func (ls *levels) push(kind levelKind, col, entry int) int {
	base := len("$")
	if n := len(ls.open); n > 0 {
		base = ls.open[n-1].entryPath()
	}
	ls.open = append(ls.open, level{kind: kind, col: col, entry: entry, base: base})
	return len(ls.open)
}

// top is the innermost open level, if any.
func (ls *levels) top() *level {
	if n := len(ls.open); n > 0 {
		return &ls.open[n-1]
	}
	return nil
}

// pop closes the innermost level.
func (ls *levels) pop() { ls.open = ls.open[:len(ls.open)-1] }

// reset closes them all: the parser reads each document on its own.
func (ls *levels) reset() { ls.open = ls.open[:0] }

// popBlock closes the block levels inside the innermost flow one.
func (ls *levels) popBlock() {
	n := len(ls.open)
	for n > 0 && !ls.open[n-1].kind.flow() {
		n--
	}
	ls.open = ls.open[:n]
}

// closeFlow closes the innermost flow level and what is inside it.
func (ls *levels) closeFlow() {
	ls.popBlock()
	if len(ls.open) > 0 {
		ls.pop()
	}
}

// popRightOf closes the block levels right of col: a "-" or key left of a
// list's or mapping's own column ends it.
func (ls *levels) popRightOf(col int) {
	n := len(ls.open)
	for n > 0 && !ls.open[n-1].kind.flow() && ls.open[n-1].col > col {
		n--
	}
	ls.open = ls.open[:n]
}

// continueAt finds the block level of kind at column col that a "-" or key
// at col continues: it closes the block levels right of col and those at
// col whose latest entry has its value (lastStart and prevStart being the
// latest two starts before the entry in question), and returns nil where
// the entry opens a level of its own.
func (ls *levels) continueAt(col int, kind levelKind, lastStart, prevStart int) *level {
	ls.popRightOf(col)
	for top := ls.top(); top != nil && !top.kind.flow() && top.col == col; top = ls.top() {
		if top.kind == kind {
			return top
		}
		if top.awaits(lastStart, prevStart) {
			break
		}
		ls.pop()
	}
	return nil
}
