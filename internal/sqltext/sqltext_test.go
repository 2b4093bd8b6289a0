package sqltext

import (
	"slices"
	"testing"
)

func TestSplitFindsTheSemicolonsPostgreSQLWould(t *testing.T) {
	cases := []struct {
		text string
		want []string
	}{
		{"SELECT 1", []string{"SELECT 1"}},
		{"SELECT 1;", []string{"SELECT 1"}},
		{"  SELECT 1 ; -- done\n", []string{"  SELECT 1 "}},
		{"SELECT 1; SELECT 2", []string{"SELECT 1", " SELECT 2"}},
		{"COMMIT; INSERT INTO t VALUES (1)", []string{"COMMIT", " INSERT INTO t VALUES (1)"}},
		{";;", nil},
		{"-- only a comment; really\n/* and; this */", nil},
		{"SELECT 'a;b'", []string{"SELECT 'a;b'"}},
		{"SELECT 'it''s; fine'", []string{"SELECT 'it''s; fine'"}},
		{`SELECT E'a\';b'`, []string{`SELECT E'a\';b'`}},
		{`SELECT 'a\'; SELECT 2`, []string{`SELECT 'a\'`, " SELECT 2"}}, // standard strings: \ is plain
		{`SELECT "we;ird" FROM t`, []string{`SELECT "we;ird" FROM t`}},
		{"SELECT 1 /* a /* nested; */ still; */", []string{"SELECT 1 /* a /* nested; */ still; */"}},
		{"SELECT 1 -- a; b\n; SELECT 2", []string{"SELECT 1 -- a; b\n", " SELECT 2"}},
		{"DO $$ BEGIN PERFORM 1; END $$", []string{"DO $$ BEGIN PERFORM 1; END $$"}},
		{"DO $fn$ x; $$ y; $fn$; SELECT 2", []string{"DO $fn$ x; $$ y; $fn$", " SELECT 2"}},
		{"SELECT $1; SELECT 2", []string{"SELECT $1", " SELECT 2"}},
		{"SELECT a$b$c; SELECT 2", []string{"SELECT a$b$c", " SELECT 2"}},
		{"SELECT 'unterminated; SELECT 2", []string{"SELECT 'unterminated; SELECT 2"}},
	}
	for _, c := range cases {
		var got []string
		for _, s := range Split(c.text) {
			got = append(got, s.Text)
			if c.text[s.Start:s.Start+len(s.Text)] != s.Text {
				t.Errorf("Split(%q): statement %q does not start at %d", c.text, s.Text, s.Start)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Split(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

func TestWordsAreTheLeadingKeywordsUpperCased(t *testing.T) {
	cases := []struct {
		text string
		n    int
		want []string
	}{
		{"  /* x */ set  transaction isolation level serializable", 2, []string{"SET", "TRANSACTION"}},
		{"-- c\ncommit", 2, []string{"COMMIT"}},
		{"(SELECT 1)", 1, nil},
		{"start\ttransaction", 3, []string{"START", "TRANSACTION"}},
		{"", 1, nil},
	}
	for _, c := range cases {
		if got := Words(c.text, c.n); !slices.Equal(got, c.want) {
			t.Errorf("Words(%q, %d) = %q, want %q", c.text, c.n, got, c.want)
		}
	}
}
