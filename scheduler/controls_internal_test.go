package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/notify"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// fixedControls are controls given by a test.
type fixedControls struct {
	st      controls.State
	changed notify.Notifier
}

func (f *fixedControls) Current() (controls.State, bool) { return f.st, true }
func (f *fixedControls) Changed() <-chan struct{}        { return f.changed.Wait() }

// A drained instance is no candidate for the spread: an instance that leads
// more than it does not hold back for it, nor hands a job over to it; and a
// paused job, which nobody leads, does not keep the load from being settled.
func TestTheSpreadLeavesDrainedInstancesAndPausedJobsOut(t *testing.T) {
	t.Parallel()
	ctl := &fixedControls{st: controls.State{
		Drains: map[string]controls.Drain{"c": {Instance: "c", By: "alice@web1"}},
		Pauses: map[string]controls.Pause{"job-3": {Job: "job-3", By: "bob@web2"}},
	}}
	holdbacks := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "h"}, []string{"job"})
	// a leads two, b one, c (drained) none; job-3 is paused: three led of four.
	sess := &loadSession{load: map[string]int{"a": 2, "b": 2, "c": 0}}
	sp := newSpread(sess, "a", holdbacks)
	sp.gate = &gate{ctl: ctl, instance: "a"}
	sp.singletons = 4
	sp.leading.Store(2)
	if d := sp.holdback(&job{spec: configs.Job{Name: "job-0"}}); d != 0 {
		t.Errorf("a held back %v for the drained instance", d)
	}
	if n := testutil.ToFloat64(holdbacks.WithLabelValues("job-0")); n != 0 {
		t.Errorf("%v hold-backs counted for a drained instance", n)
	}
	sp.gate = nil
	sess.load = map[string]int{"a": 2, "b": 2, "c": 0}
	if d := sp.holdback(&job{spec: configs.Job{Name: "job-0"}}); d == 0 {
		t.Error("without the drain, a does not hold back for c, which leads fewer: the case above shows nothing")
	}

	// Handing over: a leads three, b none but is drained, c one; job-3 paused.
	jobs := []*job{{spec: configs.Job{Name: "job-3"}, mode: leaderMode}}
	ctl.st.Drains = map[string]controls.Drain{"b": {Instance: "b"}}
	g := &gate{ctl: ctl, instance: "a"}
	load := g.undrained(map[string]int{"a": 3, "b": 0, "c": 1})
	singletons := 5 - g.pausedSingletons(jobs)
	if target, ok := handOverTo("a", load, singletons); !ok || target != "c" {
		t.Errorf("a, leading 3 of 4 led jobs, hands over to %q (%v); want c, not the drained b", target, ok)
	}
	if _, ok := handOverTo("a", map[string]int{"a": 3, "b": 0, "c": 1}, 5); ok {
		t.Error("with a paused job counted, the load is never settled: the case above shows nothing")
	}
}

// An interval job counts from the last run of its schedule: a manual run
// (snip-jobs run JOB) in between neither pushes the next run back nor brings
// it forward.
func TestAManualRunDoesNotMoveTheInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	pool := dbtest.Pool(t, db.Runtime)
	j := &job{spec: configs.Job{Name: "prune", Schedule: configs.Schedule{Kind: configs.Interval, Every: 20 * time.Second}}}
	rn := &runner{pool: pool}
	for _, r := range []struct {
		trigger string
		ago     float64
	}{{"schedule", 10}, {"manual", 1}} {
		if _, err := pool.Exec(ctx, `INSERT INTO job_runs (job, instance, trigger, started_at) VALUES ('prune', 'server-1', $1, now() - make_interval(secs => $2))`,
			r.trigger, r.ago); err != nil {
			t.Fatal(err)
		}
	}
	if d := rn.untilDue(ctx, j, true, time.Time{}); d < 8*time.Second || d > 10*time.Second {
		t.Errorf("next run in %v; want about 10 s (20 s after the scheduled run, not after the manual one)", d)
	}
}
