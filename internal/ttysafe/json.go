package ttysafe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf16"
	"unicode/utf8"
)

// JSON writes v as indented JSON (two spaces, one value and a line feed, as
// json.Encoder with SetIndent writes it) with every character a terminal
// may obey written as a JSON escape. encoding/json escapes C0 controls
// itself (and U+2028, U+2029), but writes DEL, the C1 controls (U+0080 to
// U+009F, CSI among them) and the format characters (bidi embeddings,
// overrides, isolates and marks: U+061C, U+200E, U+200F, U+202A to U+202E,
// U+2066 to U+2069; zero-width characters) as they are: here they are
// \u0085, \u202e…, which a JSON reader decodes to the text as stored. Every
// --json output of the CLI goes through here.
func JSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escapeJSON(b.Bytes()))
	return err
}

// escapeJSON escapes, in encoded JSON, the characters of unsafeRune that
// encoding/json leaves raw: all of them are outside ASCII (DEL aside), and
// outside ASCII a JSON text holds characters only inside its strings, where
// \uXXXX (a surrogate pair beyond the BMP) means the same character. A
// byte that is not UTF-8 (encoding/json writes none) becomes \ufffd, as
// encoding/json would have made it.
func escapeJSON(js []byte) []byte {
	if jsonSafe(js) {
		return js
	}
	var b bytes.Buffer
	b.Grow(len(js) + 32)
	for i := 0; i < len(js); {
		r, size := utf8.DecodeRune(js[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteString(`\ufffd`)
		case jsonUnsafe(r) && r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		case jsonUnsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.Write(js[i : i+size])
		}
		i += size
	}
	return b.Bytes()
}

// jsonUnsafe: what String escapes, but for the C0 controls, which
// encoding/json escapes inside strings and which outside them are its own
// line feeds and indentation.
func jsonUnsafe(r rune) bool { return r >= 0x7f && unsafeRune(r) }

func jsonSafe(js []byte) bool {
	for i := 0; i < len(js); {
		if js[i] < 0x7f {
			i++
			continue
		}
		r, size := utf8.DecodeRune(js[i:])
		if (r == utf8.RuneError && size <= 1) || jsonUnsafe(r) {
			return false
		}
		i += size
	}
	return true
}
