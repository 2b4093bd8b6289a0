package migrations

import (
	"context"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

// 0013 gives every run of job_runs a trigger: 'schedule' for the rows before
// it and for writers that do not name one (a binary from before it, during a
// rolling upgrade), only the three known values accepted. Its Down takes the
// column away and leaves the runs; Up again puts it back.
func TestJobRunsTriggerDefaultsToScheduleAcceptsTheThreeAndGoesWithItsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := benchtest.PostgresDB(t)
	p, closeDB, err := open(ctx, url, options{fsys: embedded})
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB()
	if _, err := p.UpTo(ctx, 12); err != nil {
		t.Fatal(err)
	}
	c := connect(t, url)
	if _, err := c.Exec(ctx, `INSERT INTO job_runs (job, instance) VALUES ('report', 'server-1')`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpByOne(ctx); err != nil {
		t.Fatalf("0013 up: %v", err)
	}
	// A writer that knows nothing of the column (the previous release).
	if _, err := c.Exec(ctx, `INSERT INTO job_runs (job, instance) VALUES ('report', 'server-2')`); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []string{"schedule", "catch-up", "manual"} {
		if _, err := c.Exec(ctx, `INSERT INTO job_runs (job, instance, trigger) VALUES ('report', 'server-3', $1)`, tr); err != nil {
			t.Errorf("trigger %q: %v", tr, err)
		}
	}
	for _, tr := range []string{"cron", "Manual", ""} {
		if _, err := c.Exec(ctx, `INSERT INTO job_runs (job, instance, trigger) VALUES ('report', 'server-3', $1)`, tr); err == nil || !strings.Contains(err.Error(), "SQLSTATE 23514") {
			t.Errorf("trigger %q: %v; want the check's refusal", tr, err)
		}
	}
	if _, err := c.Exec(ctx, `INSERT INTO job_runs (job, instance, trigger) VALUES ('report', 'server-3', NULL)`); err == nil || !strings.Contains(err.Error(), "SQLSTATE 23502") {
		t.Errorf("trigger NULL: %v; want the not-null refusal", err)
	}
	var got string
	if err := c.QueryRow(ctx, `SELECT string_agg(instance || ' ' || trigger, ', ' ORDER BY id) FROM job_runs`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := "server-1 schedule, server-2 schedule, server-3 schedule, server-3 catch-up, server-3 manual"; got != want {
		t.Errorf("job_runs: %s\nwant %s", got, want)
	}

	if _, err := p.Down(ctx); err != nil {
		t.Fatalf("0013 down: %v", err)
	}
	var hasColumn bool
	var runs int
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT FROM information_schema.columns WHERE table_name = 'job_runs' AND column_name = 'trigger'),
		(SELECT count(*) FROM job_runs)`).Scan(&hasColumn, &runs); err != nil {
		t.Fatal(err)
	}
	if hasColumn || runs != 5 {
		t.Errorf("after 0013's down: trigger column %v, %d runs; want no column and the 5 runs", hasColumn, runs)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 12 {
		t.Errorf("after 0013's down: version %d, %v; want 12", v, err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if err := c.QueryRow(ctx, `SELECT string_agg(DISTINCT trigger, ',') FROM job_runs`).Scan(&got); err != nil || got != "schedule" {
		t.Errorf("after up again: triggers %q, %v; want every run's schedule", got, err)
	}
}
