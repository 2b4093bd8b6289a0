package certrenew_test

import (
	"context"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// An operator's manual run (snip-jobs run cert-renewer) is one pass, and the
// pass's last transaction, which marks its term idle, completes the request.
// Its leader killed right after that commit, before the scheduler records the
// outcome, leaves nothing to run again: the request is done with the dead
// leader's token, and a new request is a new one.
func TestAManualRunCompletesInThePassesLastTransaction(t *testing.T) {
	t.Parallel()
	jc, _, opts := schedulerCluster(t)
	committed := make(chan int64, 1) // a's token, once its manual pass returned
	wrapped := jobtest.WrapRuns(certrenew.Type(), func(ctx context.Context, r *scheduler.Run, run jobtest.RunFunc) error {
		err := run(ctx, r)
		if r.Instance == "a" && r.ManualRun != 0 && err == nil {
			committed <- r.Token
			<-ctx.Done() // killed before the scheduler records the outcome
			return ctx.Err()
		}
		return err
	})
	reg := jobtest.Registry(t, wrapped)
	spec := configs.Job{Name: jobName, Type: "certrenew", Singleton: true, Grace: 2 * time.Second,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: 1000 * time.Hour}, Options: jobtest.Options(t, opts)}
	jobs := []configs.Job{spec}
	first := jc.Start("a", reg, jobs)
	jc.WaitCommit("a's first pass over", []string{"job_runs"}, func() bool {
		return benchtest.Value[int64](t, jc.DB, `SELECT count(*) FROM job_runs WHERE job = $1 AND finished_at IS NOT NULL`, jobName) == 1
	})

	m1, _, err := controls.RequestRun(context.Background(), jc.DB, spec, "test")
	if err != nil {
		t.Fatal(err)
	}
	token := <-committed
	var state string
	var reqToken int64
	var sameTx bool
	err = jc.DB.QueryRow(context.Background(), `SELECT m.state, coalesce(m.token, 0), coalesce(m.finished_at = t.seen_at AND t.state = 'idle', false)
		FROM manual_runs m, certrenew_terms t WHERE m.id = $1 AND t.job = $2 AND t.token = $3`, m1.ID, jobName, token).
		Scan(&state, &reqToken, &sameTx)
	if err != nil {
		t.Fatal(err)
	}
	if state != "done" || reqToken != token || !sameTx {
		t.Fatalf("after a's manual pass returned: the request %s with token %d, completed with the term's idle mark: %v; want done with token %d in that transaction",
			state, reqToken, sameTx, token)
	}

	jc.Start("b", reg, jobs)
	first.Crash()
	jobtest.Eventually(t, "b leading", func() bool { l, ok := jc.Leader(jobName); return ok && l.Instance == "b" })
	m2, joined, err := controls.RequestRun(context.Background(), jc.DB, spec, "test")
	if err != nil || joined || m2.ID == m1.ID {
		t.Fatalf("a second request: %+v, joined %v, %v; want a new one (the first was done)", m2, joined, err)
	}
}
