package ttysafe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// JSON writes every character a terminal may obey as a JSON escape — the C0
// controls as encoding/json does, and DEL, the C1 controls and the bidi and
// other format characters, which encoding/json leaves raw — and decodes to
// the text as stored.
func TestJSONEscapesC1AndBidiControlsAndDecodesToTheStoredText(t *testing.T) {
	type row struct {
		Domain string            `json:"domain"`
		Error  string            `json:"error"`
		Tags   map[string]string `json:"tags"`
	}
	in := row{
		Domain: "shop\u202eexample.com",
		Error: "c1 \u0080\u0085\u009b31m\u009f bidi \u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069" +
			" esc \x1b[2J del \x7f zero\u200bwidth \u00ad\ufeff tag \U000E0001 line\u2028 kept: évènement ✓ 😀",
		Tags: map[string]string{"key\u202e": "\u009b"},
	}
	var out bytes.Buffer
	if err := JSON(&out, in); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, r := range got {
		if r == utf8.RuneError || (unsafeRune(r) && r != '\n') {
			t.Errorf("raw %U in:\n%s", r, got)
		}
	}
	for _, want := range []string{
		`\u0080\u0085\u009b31m\u009f`,
		`\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069`,
		`\u001b[2J`, `del \u007f`, `zero\u200bwidth`, `\udb40\udc01`, `"key\u202e": "\u009b"`,
		"kept: évènement ✓ 😀",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %s:\n%s", want, got)
		}
	}
	var back row
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, got)
	}
	if back.Domain != in.Domain || back.Error != in.Error || back.Tags["key\u202e"] != "\u009b" {
		t.Errorf("decoded %+v\nwant     %+v", back, in)
	}

	// Text without such characters comes out as encoding/json writes it.
	plain := map[string]any{"domain": "évènement.fr", "n": 3, "html": "<a&b>"}
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetIndent("", "  ")
	if err := enc.Encode(plain); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := JSON(&out, plain); err != nil || out.String() != want.String() {
		t.Errorf("JSON(%v) = %q, %v; want encoding/json's %q", plain, out.String(), err, want.String())
	}
}
