package configs

import "github.com/goccy/go-yaml/lexer"

// ParseCounting is Parse, also returning how many YAML nodes the file's
// aliases and merge keys produced: the work Parse did beyond the file as
// written, whatever the machine's speed.
var ParseCounting = parseCounting

// Effective is what the job type's OptionsType kept of o at Parse (what
// Redacted prints).
func Effective(o Options) any { return o.checked.Effective }

// Guard runs the guard before the YAML library on data, a file's text.
func Guard(data []byte) *Error {
	_, err := checkGuard("guard.yaml", data)
	return err
}

// GuardCounts reads data as the guard does, with no limits: its words and
// indicators, the deepest nesting and the longest path it counts.
func GuardCounts(data []byte) (words, depth, path int) {
	words, _ = countWords(data, 1<<30)
	n := newNesting(1<<30, 1<<30)
	for _, tk := range lexer.Tokenize(string(data)) {
		n.read(tk)
	}
	n.closeQ()
	return words, n.maxDepth, n.maxPath
}
