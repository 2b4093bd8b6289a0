package configs

import "unicode/utf8"

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
//
// Its parts, by file:
//
//   - shapeScanner: the library's scan loop and its switch on each character
//     (shape_scan.go), the indicators that make lists and mappings
//     (shape_indicators.go), quoted scalars (shape_quoted.go) and block
//     scalars (shape_blockscalar.go);
//   - scanState, where the library's scanner is in the text and the state of
//     the line (shape_text.go), and scanContext, its Context
//     (shape_context.go);
//   - shapeParser, what the parser makes of the tokens (shape_nesting.go),
//     with levels, the stack of lists and mappings open (shape_levels.go);
//   - shapeMeter, what the scan counts, held to the limits (shape_limits.go).

// shapeScanner reads a file's text as the library's scanner does.
type shapeScanner struct {
	st  scanState   // the library's Scanner: where it is in the text, the line's state
	ctx scanContext // the library's Context, started afresh after each invalid token (newContext)

	// What the scan measures.
	meter shapeMeter  // tokens, steps, depth, against the caps
	tree  shapeParser // the levels open, by the parser's rules
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
