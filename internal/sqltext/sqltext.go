// Package sqltext splits SQL text into statements the way PostgreSQL's lexer
// sees them, so that a config file's statement can be checked before it runs:
// how many statements it holds, and which keywords start each.
//
// It knows what can hide a ';' from the split: string constants ('…', a quote
// doubled inside; E'…' with backslash escapes too), quoted identifiers ("…"), dollar
// quoting ($$…$$, $tag$…$tag$), line comments (-- …) and block comments
// (/* … */, nested). It is not a parser: a statement it counts as one may still
// be invalid SQL, and the server's own lexer is the final word (the sql job
// sends its statement with the extended protocol, which refuses several).
// Text it cannot close (an unterminated quote or comment) is one statement
// running to the end.
package sqltext

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Statement is one statement of the text: not empty, not only comments.
type Statement struct {
	Text  string // as written, without the ';' that ends it
	Start int    // byte offset in the text
}

// Split returns the statements of text, in order.
func Split(text string) []Statement {
	var out []Statement
	start := 0
	for i := 0; i < len(text); {
		switch {
		case text[i] == ';':
			out = appendStatement(out, text[start:i], start)
			i++
			start = i
		default:
			i = skip(text, i)
		}
	}
	return appendStatement(out, text[start:], start)
}

func appendStatement(out []Statement, s string, start int) []Statement {
	if skipSpaceAndComments(s, 0) == len(s) {
		return out
	}
	return append(out, Statement{Text: s, Start: start})
}

// skip returns the index after the token starting at i: a whole quoted
// string, identifier, dollar-quoted body or comment, else one character.
func skip(s string, i int) int {
	switch c := s[i]; {
	case c == '\'':
		return closeQuote(s, i+1, '\'', i > 0 && (s[i-1] == 'E' || s[i-1] == 'e') && !identChar(before(s, i-1)))
	case c == '"':
		return closeQuote(s, i+1, '"', false)
	case c == '-' && strings.HasPrefix(s[i:], "--"):
		if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
			return i + j + 1
		}
		return len(s)
	case c == '/' && strings.HasPrefix(s[i:], "/*"):
		return closeComment(s, i+2)
	case c == '$':
		if tag, ok := dollarTag(s, i); ok {
			if j := strings.Index(s[i+len(tag):], tag); j >= 0 {
				return i + len(tag) + j + len(tag)
			}
			return len(s)
		}
	}
	_, size := utf8.DecodeRuneInString(s[i:])
	return i + size
}

// before returns the rune ending just before index i, or 0.
func before(s string, i int) rune {
	if i <= 0 {
		return 0
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return r
}

// closeQuote returns the index after the quote closing the one before i; a
// doubled quote is part of the text, and with backslashes (E'…') so is an
// escaped character.
func closeQuote(s string, i int, q byte, backslashes bool) int {
	for i < len(s) {
		switch {
		case backslashes && s[i] == '\\':
			i += 2
		case s[i] == q && i+1 < len(s) && s[i+1] == q:
			i += 2
		case s[i] == q:
			return i + 1
		default:
			i++
		}
	}
	return len(s)
}

// closeComment returns the index after the */ closing the block comment whose
// body starts at i; block comments nest.
func closeComment(s string, i int) int {
	depth := 1
	for i < len(s) {
		switch {
		case strings.HasPrefix(s[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(s[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return len(s)
}

// dollarTag returns the dollar quote starting at i ("$$", "$fn$"), if one
// does: a '$' that does not end an identifier ($1 is a parameter, a$b$ an
// identifier), then an optional tag that does not start with a digit, then '$'.
func dollarTag(s string, i int) (string, bool) {
	if identChar(before(s, i)) {
		return "", false
	}
	j := i + 1
	for j < len(s) {
		r, size := utf8.DecodeRuneInString(s[j:])
		if r == '$' {
			tag := s[i : j+1]
			if len(tag) > 2 && unicode.IsDigit(rune(tag[1])) {
				return "", false
			}
			return tag, true
		}
		if !identChar(r) || r == '$' {
			return "", false
		}
		j += size
	}
	return "", false
}

func identChar(r rune) bool {
	return r == '_' || r == '$' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// skipSpaceAndComments returns the index of the first character at or after i
// that is neither white space nor inside a comment.
func skipSpaceAndComments(s string, i int) int {
	for i < len(s) {
		switch {
		case unicode.IsSpace(rune(s[i])):
			i++
		case strings.HasPrefix(s[i:], "--"), strings.HasPrefix(s[i:], "/*"):
			i = skip(s, i)
		default:
			return i
		}
	}
	return i
}

// Words returns up to n leading keywords of statement, upper-cased: the
// words before the first character that is not part of a plain word (a
// quote, a parenthesis, an operator), skipping white space and comments.
// "  /* x */ set  transaction isolation" gives [SET TRANSACTION] for n = 2.
func Words(statement string, n int) []string {
	var words []string
	i := 0
	for len(words) < n {
		i = skipSpaceAndComments(statement, i)
		j := i
		for j < len(statement) {
			r, size := utf8.DecodeRuneInString(statement[j:])
			if r == '$' || !identChar(r) {
				break
			}
			j += size
		}
		if j == i {
			break
		}
		words = append(words, strings.ToUpper(statement[i:j]))
		i = j
	}
	return words
}
