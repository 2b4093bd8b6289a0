package configs

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/token"
)

// checkGuard refuses a file at the file:line:col where it first crosses a
// limit, before the YAML library (goccy/go-yaml), which has none, builds its
// tree; else it returns the library's tokens of the file, for its parser.
// Each step bounds the next: costlyAt and countWords read the bytes (the
// scanner's steps, MaxScanSteps; an over-count of its tokens, MaxWords), the
// library's scanner makes the tokens (MaxNodes counts them, comments too),
// and nesting reads them as its parser will, counting at least the depth
// (MaxDepth) and the longest path (MaxKeyPath) it would build: it may count
// more. TestTheGuardCountsAtLeastWhatTheYAMLLibraryBuilds and FuzzGuard hold
// it to the library; run FuzzGuard a while after upgrading goccy/go-yaml.
func checkGuard(file string, text []byte) (token.Tokens, *Error) {
	cut, cutErr := len(text), (*Error)(nil) // the earliest crossing is the one said
	if at := costlyAt(text); at >= 0 {
		cut, cutErr = at, &Error{Pos: offsetPos(file, text, at), Msg: fmt.Sprintf(tooManySteps, MaxScanSteps)}
	}
	if _, at := countWords(text[:cut], MaxWords); at >= 0 {
		cut, cutErr = at, &Error{Pos: offsetPos(file, text, at), Msg: fmt.Sprintf(tooManyWords, MaxWords)}
	}
	tokens := lexer.Tokenize(string(text[:cut]))
	n := newNesting(MaxDepth, MaxKeyPath)
	for i, tk := range tokens {
		if i == MaxNodes {
			n.err = fmt.Sprintf(tooManyNodes, MaxNodes)
		} else if n.read(tk); i == len(tokens)-1 {
			n.closeQ() // the latest "?"'s key ends with the file
		}
		if n.err != "" {
			return nil, &Error{Pos: Pos{File: file, Line: tk.Position.Line, Col: tk.Position.Column}, Msg: n.err}
		}
	}
	if cutErr != nil {
		return nil, cutErr
	}
	return tokens, nil
}

// What the guard says where a file crosses a limit (%d: the limit).
const (
	tooManyNodes = "the file has more than %d YAML nodes by here (each key, value, comment, \"-\", \":\", \",\" and bracket counts), " +
		"the limit for a config file (a real one has a few hundred)"
	tooManyWords = "the file has more than %d words and YAML indicators by here, comments included, " +
		"the limit for a config file (a real one has a few thousand)"
	tooManySteps = "the YAML library would take more than %d steps to read the file by here, the limit for a config file: " +
		`runs of "<", and tabs in double-quoted text (write \t), cost it the square of their length`
	tooDeep    = "lists and mappings nest more than %d deep here, the limit for a config file (a real one nests about 5 deep)"
	tooLongKey = "the keys leading here, this one included, are more than %d characters long together, the limit for a config file " +
		"(the YAML library copies them into every value below)"
)

// costlyAt is the byte offset where the library's scanner would cross
// MaxScanSteps, or -1: it reads the rest of the line again at a tab (in
// double quotes; here anywhere) and the rest of a run of "<" at each "<".
func costlyAt(text []byte) int {
	steps, eol, run := 0, -1, 0
	for i, c := range text {
		if i > eol {
			if eol = i + bytes.IndexAny(text[i:], "\r\n"); eol < i {
				eol = len(text)
			}
		}
		switch c {
		case '\t':
			steps += eol - i
		case '<':
			if run == 0 {
				run = len(text) - i - len(bytes.TrimLeft(text[i:], "<"))
			}
			steps, run = steps+run, run-1
		}
		if steps > MaxScanSteps {
			return i
		}
	}
	return -1
}

// countWords counts the words, indicators (which may begin or end a token
// inside a word) and tabs of text, up to the one past limit, whose byte
// offset is at (else -1). The library makes at most two tokens of each (a
// block scalar's header: it, and its text or an empty one; a tab it refuses,
// and goes on), so MaxWords bounds its tokens' memory.
func countWords(text []byte, limit int) (words, at int) {
	const indicators = "-?:,[]{}#&*!|>'\"%@`<"
	prev := byte('\n')
	for i, c := range text {
		if c == '\t' || !isBlank(c) && (isBlank(prev) || strings.IndexByte(indicators, c) >= 0 || strings.IndexByte(indicators, prev) >= 0) {
			if words++; words > limit {
				return words, i
			}
		}
		prev = c
	}
	return words, -1
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// level is a list (seq) or mapping open. A flow one keeps the key state at
// its bracket (col, at): the collection may be a key.
type level struct {
	flow, seq          bool
	col, at, base, key int // base: its parent's path
}

func (l *level) path() int {
	if l.seq {
		return l.base + len("[9999]")
	}
	return l.base + len(".''") + max(l.key, len("null"))
}

// nesting is the levels the parser may have open after each token, and the latest node that
// may be a key (the tokens since the latest indicator, on its line or else before).
type nesting struct {
	depth, path, maxDepth, maxPath int
	open                           []level
	i, line, size                  int // tokens read, the line the latest ended on, their values' bytes
	keyAt, keyCol, keySize         int // the key's first token, its column, the bytes before it
	plainKey, keyNode, keyOld      bool
	prefix, strict                 bool   // a tag or anchor waits for its node; every entry nests
	skip                           bool   // the next string is an anchor's name or a block scalar's text
	afterDelim, q, qSize           int    // tokens at the latest "[", "{" or ","; a "?" until its key ends
	err                            string // the limit crossed
}

func newNesting(depth, path int) *nesting {
	return &nesting{depth: depth, path: path, maxPath: len("$"), keyAt: -1, q: -1, line: 1}
}

func (n *nesting) read(tk *token.Token) {
	t, col, skip := tk.Type, tk.Position.Column, n.skip
	n.keyOld, n.skip = n.keyOld || tk.Position.Line > n.line, false
	n.line = tk.Position.Line + strings.Count(strings.TrimLeft(tk.Origin, " \t\r\n"), "\n") // Origin has the blanks before it
	switch {
	case skip && t == token.StringType: // an anchor's name, a block scalar's text
	case t == token.CommentType || t == token.DirectiveType || t == token.DocumentEndType:
	case t == token.DocumentHeaderType:
		n.closeQ()
		n.open = n.open[:0]
	case t == token.SequenceEntryType:
		n.entry(true, col, false, false)
		n.keyAt = -1
	case t == token.MappingKeyType:
		n.entry(false, col, false, false)
		n.q, n.qSize, n.keyAt, n.prefix = len(n.open)-1, n.size, -1, true
	case t == token.MappingValueType:
		n.mapValue(col)
	case t == token.SequenceStartType || t == token.MappingStartType:
		n.begin(col, false, false)
		n.push(level{flow: true, seq: t == token.SequenceStartType, col: n.keyCol, at: n.keyAt})
		n.afterDelim, n.keyAt = n.i, -1
	case t == token.SequenceEndType || t == token.MappingEndType:
		if n.closeQ(); n.popToFlow() { // the collection is the latest node: a key if a ":" follows
			l := n.open[len(n.open)-1]
			n.open = n.open[:len(n.open)-1]
			n.keyAt, n.keyCol, n.plainKey, n.keyNode, n.keyOld = l.at, l.col, false, true, false
		}
	case t == token.CollectEntryType:
		n.closeQ()
		n.popToFlow()
		n.afterDelim, n.keyAt = n.i, -1
	case t == token.TagType || t == token.AnchorType || t == token.AliasType:
		n.begin(col, false, t != token.AliasType)
		n.skip = t != token.TagType
		n.strict = n.strict || n.skip && (tk.Next == nil || tk.Next.Type != token.StringType) // no name: the parser takes any token
	default: // a scalar, "<<", or a block scalar's header
		n.begin(col, true, false)
		n.skip = t == token.LiteralType || t == token.FoldedType
	}
	n.i, n.size = n.i+1, n.size+len(tk.Value)
}

// begin records a node, or a tag or anchor (prefix) that goes with the node
// after it, which may be a key; one with a prefix nests (the parser may give it the mapping).
func (n *nesting) begin(col int, scalar, prefix bool) {
	if n.keyAt < 0 || n.keyOld || n.keyNode {
		n.keyAt, n.keyCol, n.keySize, n.plainKey, n.keyOld = n.i, col, n.size, !n.prefix, false
	}
	n.plainKey, n.keyNode, n.prefix = n.plainKey && scalar, !prefix, prefix
}

// mapValue reads a ":" after a key. Its path is its first node's value (the
// parser's mapKeyText): at most the values since its first token.
func (n *nesting) mapValue(col int) {
	keyLen := 0
	if n.keyAt >= 0 {
		col, keyLen = n.keyCol, n.size-n.keySize
	}
	q, k := n.q, len(n.open)
	own := k > 0 && n.open[k-1].flow && !n.open[k-1].seq && n.i-n.afterDelim <= 3
	l := n.entry(false, col, n.keyAt >= 0 && !n.plainKey, own)
	if q == len(n.open)-1 { // the "?"'s own ":"
		keyLen = max(keyLen, n.size-n.qSize)
	}
	n.setKey(l, keyLen)
	n.keyAt = -1
}

// entry opens a level for a "-" (seq) or key at col, or continues one of its
// kind at col; nests: whatever is open; own: a flow mapping's own key. The
// parser ends a level at an entry left of it (or at its column, if of the
// other kind and its entry has a value: here it nests).
func (n *nesting) entry(seq bool, col int, nests, own bool) *level {
	n.closeQ()
	nests, n.prefix = nests || n.prefix || n.strict, false
	for k := len(n.open); k > 0; k = len(n.open) {
		switch top := &n.open[k-1]; {
		case top.flow && own:
			return top
		case nests || top.flow || top.col < col || top.col == col && top.seq != seq:
			return n.push(level{seq: seq, col: col})
		case top.col == col:
			return top
		}
		n.open = n.open[:k-1]
	}
	return n.push(level{seq: seq, col: col})
}

func (n *nesting) push(l level) *level {
	l.base = len("$")
	if k := len(n.open); k > 0 {
		l.base = n.open[k-1].path()
	}
	if n.open = append(n.open, l); len(n.open) > n.depth && n.err == "" {
		n.err = fmt.Sprintf(tooDeep, n.depth)
	}
	n.maxDepth = max(n.maxDepth, len(n.open))
	n.setKey(&n.open[len(n.open)-1], 0)
	return &n.open[len(n.open)-1]
}

func (n *nesting) popToFlow() bool { // to the innermost flow level, if any
	k := len(n.open)
	for k > 0 && !n.open[k-1].flow {
		k--
	}
	if k > 0 {
		n.open = n.open[:k]
	}
	return k > 0
}

func (n *nesting) setKey(l *level, size int) {
	if l.key = size; l.path() > n.path && n.err == "" {
		n.err = fmt.Sprintf(tooLongKey, n.path)
	}
	n.maxPath = max(n.maxPath, l.path())
}

func (n *nesting) closeQ() { // the latest "?"'s key ends: at most the tokens since
	if n.q >= 0 && n.q < len(n.open) {
		n.setKey(&n.open[n.q], max(n.open[n.q].key, n.size-n.qSize))
	}
	n.q = -1
}
