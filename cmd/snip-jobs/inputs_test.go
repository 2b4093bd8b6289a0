package main

import "testing"

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
