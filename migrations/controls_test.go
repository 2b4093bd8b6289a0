package migrations

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

// 0014 adds the operators' controls: every change to them is notified on
// snip_jobs_controls when its transaction commits (not before), naming the
// table; a job has at most one open manual run; its Down removes the tables
// and the function, and Up puts them back.
func TestTheControlsNotifyAtCommitAndAJobHasOneOpenManualRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := benchtest.PostgresDB(t)
	p, closeDB, err := open(ctx, url, options{fsys: embedded})
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB()
	if _, err := p.UpTo(ctx, 14); err != nil {
		t.Fatal(err)
	}
	listener := connect(t, url)
	if _, err := listener.Exec(ctx, `LISTEN snip_jobs_controls`); err != nil {
		t.Fatal(err)
	}
	next := func() (string, bool) {
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		n, err := listener.WaitForNotification(wctx)
		if err != nil {
			return "", false
		}
		return n.Payload, true
	}
	c := connect(t, url)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO job_pauses (job, paused_by, reason) VALUES ('report', 'alice@web1', 'mail server moves')`); err != nil {
		t.Fatal(err)
	}
	if got, ok := next(); ok {
		t.Fatalf("notified %q before the commit", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := next(); !ok || got != "job_pauses" {
		t.Fatalf("after the commit: %q, %v; want job_pauses", got, ok)
	}
	for table, sql := range map[string]string{
		"instance_drains": `INSERT INTO instance_drains (instance, drained_by) VALUES ('server-2', 'bob@web2')`,
		"manual_runs":     `INSERT INTO manual_runs (job, mode, requested_by) VALUES ('report', 'leader', 'carol@web3')`,
	} {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
		if got, ok := next(); !ok || got != table {
			t.Errorf("%s: notified %q, %v", table, got, ok)
		}
	}
	_, err = c.Exec(ctx, `INSERT INTO manual_runs (job, mode, requested_by) VALUES ('report', 'leader', 'dave@web1')`)
	if err == nil || !strings.Contains(err.Error(), "SQLSTATE 23505") {
		t.Errorf("a second open manual run of a job: %v; want the unique index's refusal", err)
	}
	if _, err := c.Exec(ctx, `UPDATE manual_runs SET state = 'done'`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `INSERT INTO manual_runs (job, mode, requested_by) VALUES ('report', 'leader', 'dave@web1')`); err != nil {
		t.Errorf("a new request once the first is done: %v", err)
	}

	if _, err := p.Down(ctx); err != nil {
		t.Fatalf("0014 down: %v", err)
	}
	var left int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname IN ('job_pauses', 'instance_drains', 'manual_runs', 'manual_run_reports')`).Scan(&left); err != nil || left != 0 {
		t.Errorf("after 0014's down: %d of its tables left (%v)", left, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}
