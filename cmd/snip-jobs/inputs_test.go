package main

import (
	"strings"
	"testing"
)

// validate refuses transaction control in a sql job's statement however it
// is spelled: "; COMMIT" is one statement, COMMIT, behind an empty one
// (PostgreSQL's lexer drops it), and used to pass validate, to fail only
// when it ran. Reported at the statement's file:line:col, exit 2.
func TestValidateRefusesTransactionControlBehindAnEmptyStatement(t *testing.T) {
	t.Parallel()
	n := newNamedFiles(t)
	path := n.config("commit.yaml",
		"instance: server-1",
		"jobs:",
		"  - name: the-job",
		"    type: sql",
		"    every: 1h",
		"    options:",
		`      statement: "; COMMIT"`, // 7:18
	)
	r := snip(t, nil, "validate", "--config", path)
	want := path + `:7:18: job "the-job": options.statement: COMMIT is transaction control`
	if r.code != 2 || len(linesWith(r.stderr, want)) != 1 {
		t.Errorf("exit %d, want 2 and a line starting %q; stderr:\n%s", r.code, want, r.stderr)
	}
}

// An operator's reason and name are capped before anything is contacted:
// pause --reason and drain --reason at 500 characters, --by at 200 (a
// reason of 131 KB used to be stored, and shown on every status page). A
// usage error, exit 2, saying the cap.
func TestAReasonOrANameLongerThanItsCapIsBadUsage(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("é", n) } // characters, not bytes
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "--reason", long(501), "some-job"}, "usage: the reason (--reason) is 501 characters long; it may be at most 500"},
		{[]string{"drain", "--reason", long(60000)}, "usage: the reason (--reason) is 60000 characters long; it may be at most 500"},
		{[]string{"pause", "--by", long(201), "some-job"}, "usage: who asks (--by) is 201 characters long; it may be at most 200"},
		{[]string{"resume", "--by", long(201), "some-job"}, "usage: who asks (--by) is 201 characters long; it may be at most 200"},
		{[]string{"undrain", "--by", long(201)}, "usage: who asks (--by) is 201 characters long; it may be at most 200"},
		{[]string{"run", "--by", long(201), "some-job"}, "usage: who asks (--by) is 201 characters long; it may be at most 200"},
	} {
		args := append(c.args[:len(c.args):len(c.args)], "--config", "/nonexistent/snip-jobs.yaml")
		r := snip(t, nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "Run 'snip-jobs "+c.args[0]+" --help' for usage.") {
			t.Errorf("%s %s: exit %d, want 2 and %q; stderr:\n%.400s", c.args[0], c.args[1], r.code, c.want, r.stderr)
		}
	}
}
