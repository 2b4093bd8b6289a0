package weeklyreport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// An operator's manual run (snip-jobs run weekly-report) stores the last
// whole week's report and completes the request in the report's own
// transaction. Its leader killed right after that commit, before the
// scheduler records the outcome, leaves nothing to run again: the request is
// done with the dead leader's token, a new request is a new one, and the
// successor's run of it stores no second report.
func TestAManualRunStoresTheLastWeeksReportAndCompletesWithItOnce(t *testing.T) {
	t.Parallel()
	c := jobtest.NewCluster(t)
	committed := make(chan int64, 1) // server-1's token, once its manual run's transaction committed
	wrapped := jobtest.WrapRuns(weeklyreport.Type(), func(ctx context.Context, r *scheduler.Run, run jobtest.RunFunc) error {
		err := run(ctx, r)
		if r.Instance == "server-1" && r.ManualRun != 0 && err == nil {
			committed <- r.Token
			<-ctx.Done() // killed before the scheduler records the outcome
			return ctx.Err()
		}
		return err
	})
	reg := jobtest.Registry(t, wrapped)
	loc := steadyZone(t, time.Now())
	// Slots 1000 hours apart, none caught up: only the manual runs run.
	spec := reportJob(1000*time.Hour, loc, configs.Leader, configs.None)
	jobs := []configs.Job{spec}
	first := c.Start("server-1", reg, jobs)
	jobtest.Eventually(t, "server-1 leading", func() bool { l, ok := c.Leader(jobName); return ok && l.Instance == "server-1" })

	m1, _, err := controls.RequestRun(context.Background(), c.DB, spec, "test")
	if err != nil {
		t.Fatal(err)
	}
	c.WaitCommit("the first manual run over", []string{"manual_runs"}, func() bool {
		s := manualRun(t, c, m1.ID).state
		return s != "pending" && s != "running"
	})
	req := manualRun(t, c, m1.ID)
	if req.state != "done" {
		t.Fatalf("the manual run: %+v; want done in its run's transaction", req)
	}
	token1 := <-committed // sent as the run returned, which done precedes
	if req.token != token1 {
		t.Fatalf("the manual run after its transaction: %+v; want done with server-1's token %d", req, token1)
	}
	week := lastWholeWeek(t, loc)
	got := storedReports(t, c)
	if got.reports != 1 || got.outbox != 1 || got.token != token1 {
		t.Fatalf("stored %+v; want the report of %s and its mail, with token %d", got, week, token1)
	}
	var created time.Time
	if err := c.DB.QueryRow(context.Background(), `SELECT created_at FROM weekly_reports WHERE week = $1`, week).Scan(&created); err != nil {
		t.Fatalf("the report of the week before now (%s): %v", week, err)
	}
	if !created.Equal(req.finished) { // now() is the transaction's start
		t.Errorf("the report was created at %v, the manual run completed at %v: not in one transaction", created, req.finished)
	}

	c.Start("server-2", reg, jobs)
	first.Crash()
	jobtest.Eventually(t, "server-2 leading", func() bool { l, ok := c.Leader(jobName); return ok && l.Instance == "server-2" })
	m2, joined, err := controls.RequestRun(context.Background(), c.DB, spec, "test")
	if err != nil || joined || m2.ID == m1.ID {
		t.Fatalf("a second request: %+v, joined %v, %v; want a new one (the first was done)", m2, joined, err)
	}
	c.WaitCommit("the second manual run done", []string{"manual_runs"}, func() bool { return manualRun(t, c, m2.ID).state == "done" })
	leader, _ := c.Leader(jobName)
	if req := manualRun(t, c, m2.ID); req.token != leader.Token {
		t.Errorf("the second manual run: %+v; want done by server-2's term %d", req, leader.Token)
	}
	if again := storedReports(t, c); again != got {
		t.Errorf("after the second manual run: %+v; want the first run's report alone, %+v", again, got)
	}
}

type manualRow struct {
	state    string
	token    int64
	finished time.Time
}

func manualRun(t *testing.T, c *jobtest.Cluster, id int64) manualRow {
	t.Helper()
	var m manualRow
	if err := c.DB.QueryRow(context.Background(), `SELECT state, coalesce(token, 0), coalesce(finished_at, 'epoch') FROM manual_runs WHERE id = $1`, id).
		Scan(&m.state, &m.token, &m.finished); err != nil {
		t.Fatal(err)
	}
	return m
}

// lastWholeWeek is the label of the week before this one in loc, as the
// weekly_reports table keys it.
func lastWholeWeek(t *testing.T, loc *time.Location) string {
	t.Helper()
	y, w := time.Now().In(loc).AddDate(0, 0, -7).ISOWeek()
	return fmt.Sprintf("%04d-W%02d", y, w)
}
