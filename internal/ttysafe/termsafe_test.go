package ttysafe

import "testing"

func TestControlsAreWrittenAsVisibleEscapes(t *testing.T) {
	cases := []struct{ in, str, text string }{
		{"shop.example.com", "shop.example.com", "shop.example.com"},
		{"évènement.fr ✓", "évènement.fr ✓", "évènement.fr ✓"},
		{"\x1b]0;pwned\x07x.com", `\x1b]0;pwned\x07x.com`, `\x1b]0;pwned\x07x.com`},
		{"a\x1b[2Jb", `a\x1b[2Jb`, `a\x1b[2Jb`},
		{"csi\u009b31m", `csi\u009b31m`, `csi\u009b31m`},
		{"abc\u202edcba", `abc\u202edcba`, `abc\u202edcba`},
		{"zero\u200bwidth", `zero\u200bwidth`, `zero\u200bwidth`},
		{"line 1\nline\t2\r", `line 1\x0aline\x092\x0d`, "line 1\nline\t2\\x0d"},
		{"not utf-8: \xff\xfe", `not utf-8: \xff\xfe`, `not utf-8: \xff\xfe`},
		{"del\x7f", `del\x7f`, `del\x7f`},
	}
	for _, c := range cases {
		if got := String(c.in); got != c.str {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.str)
		}
		if got := Text(c.in); got != c.text {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.text)
		}
	}
}
