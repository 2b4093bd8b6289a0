// Package ttysafe makes text read from a database (or etcd) safe to print on
// an operator's terminal. A domain, an error text or a link's slug can hold
// bytes a terminal obeys: ESC sequences that retitle or clear it, move the
// cursor over earlier output, or write to the clipboard (OSC 52); C1 controls
// that some terminals take as ESC; bidirectional overrides that show text in
// another order than it is (CVE-2021-42574). They are written as visible
// escapes instead: \x1b, \x9b, \u202e; bytes that are not UTF-8 as \xNN.
//
// String and Text are for what the CLI prints for people. Backslashes are
// not escaped, so a stored "\x1b" of four characters prints the same as an
// escaped ESC: those escapes are for reading, not for round trips. JSON is
// for --json: the same characters written as JSON escapes (encoding/json
// itself escapes only the C0 controls, not DEL, C1 or bidi controls), which
// a JSON reader decodes to the data as stored.
package ttysafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String escapes every control character of s, line breaks and tabs
// included: for one table cell or one line.
func String(s string) string { return escape(s, false) }

// Text escapes the control characters of s except line feeds and tabs: for
// multi-line text such as a report or a list of errors.
func Text(s string) string { return escape(s, true) }

func escape(s string, keepLines bool) string {
	if safe(s, keepLines) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x80 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// safe reports whether s needs no escape (the common case, without copying).
func safe(s string, keepLines bool) bool {
	for _, r := range s {
		if r == utf8.RuneError || (unsafeRune(r) && !(keepLines && (r == '\n' || r == '\t'))) {
			return false
		}
	}
	return true
}

// unsafeRune: C0 and C1 controls and DEL (unicode.IsControl), and the format
// characters that reorder or hide text (bidi embeddings, overrides, isolates,
// marks; zero-width characters).
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}
