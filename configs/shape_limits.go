package configs

import "fmt"

// shapeLimit is the first limit the file crosses: where (a rune index) and
// what to say.
type shapeLimit struct {
	at  int
	msg string
}

// shapeMeter counts what the shape scan measures and holds it to its caps:
// it keeps the first limit crossed, after which the scan stops.
type shapeMeter struct {
	caps     shapeCaps
	tokens   int // every token the library makes, comments and errors included
	nodes    int // tokens but comments and invalid ones: what the parser reads
	steps    int // what work counts
	maxDepth int // the most levels open at once
	limit    *shapeLimit
}

// What the scan says where a file crosses a limit (%d: the limit).
const (
	tooManyNodes = "the file has more than %d YAML nodes by here (each key, value, \"-\", \":\", \",\" and bracket counts), " +
		"the limit for a config file (a real one has a few hundred)"
	tooManySteps = "the YAML library would take more than %d steps to read the file by here, the limit for a config file: " +
		`runs of "<", and tabs in double-quoted text (write \t), cost it the square of their length`
	tooDeep    = "lists and mappings nest more than %d deep here, the limit for a config file (a real one nests about 5 deep)"
	tooLongKey = "the keys leading here, this one included, are more than %d characters long together, the limit for a config file " +
		"(the YAML library copies them into every value below)"
)

// token counts a token of the library's at rune index at.
func (m *shapeMeter) token(at int) {
	m.tokens++
	m.nodes++
	if m.nodes > m.caps.nodes {
		m.cross(at, tooManyNodes, m.caps.nodes)
	}
}

// uncounted is a token that the parser never reads: a comment, or the
// invalid token of a syntax error (the parser then builds nothing).
func (m *shapeMeter) uncounted() {
	m.tokens++
}

// work counts n steps of the library's scanner at rune index at, where they
// are not one a character: it counts a run of "<" at each of its characters,
// and looks to the end of the line at each tab in double-quoted text, so that
// either costs it the square of its length (60,000 "<" in a row took 1.8 s; a
// file of them, minutes).
func (m *shapeMeter) work(n, at int) {
	m.steps += n
	if m.steps > m.caps.steps {
		m.cross(at, tooManySteps, m.caps.steps)
	}
}

// depth notes that depth lists and mappings are open at rune index at.
func (m *shapeMeter) depth(depth, at int) {
	m.maxDepth = max(m.maxDepth, depth)
	if depth > m.caps.depth {
		m.cross(at, tooDeep, m.caps.depth)
	}
}

// keyPath notes that the parser's path of the key just read, at rune index
// at, is n characters long: the keys leading to a value, as the parser writes
// its path, may be at most MaxKeyPath characters long.
func (m *shapeMeter) keyPath(n, at int) {
	if n > m.caps.keyPath {
		m.cross(at, tooLongKey, m.caps.keyPath)
	}
}

// cross records that the limit n was crossed at rune index at, unless an
// earlier one was (what says it). It is kept out of line so that the checks
// above, made at every token, are small enough to be inlined.
//
//go:noinline
func (m *shapeMeter) cross(at int, what string, n int) {
	if m.limit == nil {
		m.limit = &shapeLimit{at: at, msg: fmt.Sprintf(what, n)}
	}
}
