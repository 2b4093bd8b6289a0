package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// ended is how a run's context ended on an instance: its cause, and how many
// keep-alives the instance's session had sent then.
type ended struct {
	instance   string
	cause      error
	keepAlives int64
}

// endingType is a continuous job that writes a fenced row every 50 ms and,
// when its context ends, reports the cause with the instance's keep-alive
// count (keepAlives), on ends.
func endingType(keepAlives func(instance string) int64, ends chan<- ended) scheduler.Type {
	return scheduler.Type{Name: "ending", New: func(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			for {
				err := r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO test_events (job, instance, token) VALUES ($1, $2, $3)`, r.Job, r.Instance, r.Token)
					return err
				})
				if ctx.Err() != nil {
					ends <- ended{instance: r.Instance, cause: context.Cause(ctx), keepAlives: keepAlives(r.Instance)}
					return nil
				}
				if err != nil {
					return err
				}
				r.Progress()
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}), nil
	}}
}

// nodes is a test's instances by name, for jobs that look up their own.
type nodes struct {
	mu sync.Mutex
	m  map[string]*jobtest.Node
}

func (ns *nodes) set(n *jobtest.Node) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.m == nil {
		ns.m = map[string]*jobtest.Node{}
	}
	ns.m[n.Name] = n
}

func (ns *nodes) get(instance string) *jobtest.Node {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.m[instance]
}

func (ns *nodes) keepAlives(instance string) int64 {
	n := ns.get(instance)
	if n == nil || n.Session == nil {
		return 0
	}
	return n.Session.Stats().KeepAlivesSent
}

// waitRenewIntervals waits until every node's session has sent k more
// keep-alives: k renew intervals have passed on each, by their own count.
func waitRenewIntervals(c *jobtest.Cluster, ns []*jobtest.Node, k int64) {
	c.T.Helper()
	from := map[*jobtest.Node]int64{}
	for _, n := range ns {
		from[n] = n.Session.Stats().KeepAlivesSent
	}
	c.WaitNodes(fmt.Sprintf("%d renew intervals on every instance", k), ns, func() bool {
		for _, n := range ns {
			if n.Session.Stats().KeepAlivesSent < from[n]+k {
				return false
			}
		}
		return true
	})
}

func countEvents(t *testing.T, c *jobtest.Cluster, job string) int {
	t.Helper()
	return len(events(t, c, job))
}

// A pause ends the leader's term within one renew interval: the run's
// context ends with ErrPaused as its cause (a *HeldError naming who paused
// it and why) before its session sent a second keep-alive after the pause's
// commit; the term is recorded ended "paused", and no instance leads or runs
// the job while it is paused — for three renew intervals of every instance,
// then after every instance is stopped and started again. The status model
// and the metrics say it is paused, by whom, since when. Once resumed, an
// instance leads it again with a higher token.
func TestAPauseEndsTheTermWithinARenewIntervalAndHoldsAcrossRestartsUntilResumed(t *testing.T) {
	t.Parallel()
	jobtest.EachBackend(t, aPauseEndsTheTermWithinARenewIntervalAndHoldsAcrossRestartsUntilResumed)
}

func aPauseEndsTheTermWithinARenewIntervalAndHoldsAcrossRestartsUntilResumed(t *testing.T, b jobtest.Backend) {
	c := newClusterOn(t, b)
	ns := &nodes{}
	ends := make(chan ended, 10)
	reg := jobtest.Registry(t, endingType(ns.keepAlives, ends))
	jobs := []configs.Job{jobtest.Continuous("aggregator", "ending")}
	start := func() []*jobtest.Node {
		var started []*jobtest.Node
		for _, name := range []string{"server-1", "server-2"} {
			n := c.Start(name, reg, jobs)
			ns.set(n)
			started = append(started, n)
		}
		return started
	}
	running := start()
	first := writingLeader(t, c, "aggregator")
	leader := ns.get(first.Instance)
	pool := c.RuntimePool()
	ctx := context.Background()

	before := leader.Session.Stats().KeepAlivesSent
	if _, _, err := controls.PauseJob(ctx, pool, "aggregator", "alice@web1", "backfill running"); err != nil {
		t.Fatal(err)
	}
	e := recvEnded(t, ends)
	var held *scheduler.HeldError
	if e.instance != first.Instance || !errors.Is(e.cause, scheduler.ErrPaused) || !errors.As(e.cause, &held) ||
		held.By != "alice@web1" || held.Reason != "backfill running" {
		t.Fatalf("the run ended on %s with cause %v; want %s's, paused by alice@web1 for the backfill", e.instance, e.cause, first.Instance)
	}
	if n := e.keepAlives - before; n > 1 {
		t.Errorf("the run ended %d keep-alives after the pause's commit; want within one renew interval", n)
	}
	c.WaitCommit("the term recorded ended by the pause", []string{"job_terms"}, func() bool {
		return termReason(t, c, "aggregator", first.Token) == status.EndPaused
	})

	stillPaused := func(what string) {
		t.Helper()
		rows := countEvents(t, c, "aggregator")
		waitRenewIntervals(c, running, 3)
		if l, ok := c.Leader("aggregator"); ok {
			t.Errorf("%s: %s leads the paused job (token %d)", what, l.Instance, l.Token)
		}
		if n := countEvents(t, c, "aggregator"); n != rows {
			t.Errorf("%s: %d rows written while paused", what, n-rows)
		}
		for _, n := range running {
			if got := n.MetricSum(t, "snip_jobs_job_paused", "job", "aggregator"); got != 1 {
				t.Errorf("%s: snip_jobs_job_paused on %s = %v, want 1", what, n.Name, got)
			}
			if since := n.MetricSum(t, "snip_jobs_job_paused_since_seconds", "job", "aggregator"); since < float64(time.Now().Add(-time.Hour).Unix()) {
				t.Errorf("%s: snip_jobs_job_paused_since_seconds on %s = %v", what, n.Name, since)
			}
		}
		st := status.Read(ctx, status.Source{Pool: pool, Jobs: jobs})
		if p := st.Jobs[0].Paused; p == nil || p.By != "alice@web1" || p.Reason != "backfill running" {
			t.Errorf("%s: the status model's pause %+v", what, p)
		}
	}
	stillPaused("after the pause")

	for _, n := range running {
		n.Stop()
	}
	running = start()
	stillPaused("after every instance restarted")

	if _, err := controls.ResumeJob(ctx, pool, jobs[0], "bob@web2", false); err != nil {
		t.Fatal(err)
	}
	second := writingLeader(t, c, "aggregator")
	if second.Token <= first.Token {
		t.Errorf("after the resume: token %d, want above %d", second.Token, first.Token)
	}
	checkOneWriterAtATime(t, c, "aggregator")
}

func recvEnded(t *testing.T, ch <-chan ended) ended {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(jobtest.Patience):
		t.Fatal("no run ended")
	}
	return ended{}
}

// termReason is the recorded end reason of job's term token ("" while open).
func termReason(t *testing.T, c *jobtest.Cluster, job string, token int64) string {
	t.Helper()
	var reason *string
	if err := c.DB.QueryRow(context.Background(), `SELECT reason FROM job_terms WHERE job = $1 AND token = $2`, job, token).Scan(&reason); err != nil {
		return ""
	}
	if reason == nil {
		return ""
	}
	return *reason
}

// A cron job paused across slots: resumed, the slots that fell due while it
// was paused are recorded skipped and never run (leader mode and database
// mode alike); paused again and resumed with catch-up, the slots of that
// pause run (due within the on-time window, they run whatever the policy).
func TestCronSlotsInsideAPauseAreSkippedOrCaughtUpWithResumeCatchUp(t *testing.T) {
	t.Parallel()
	jobtest.EachBackend(t, cronSlotsInsideAPauseAreSkippedOrCaughtUpWithResumeCatchUp)
}

func cronSlotsInsideAPauseAreSkippedOrCaughtUpWithResumeCatchUp(t *testing.T, b jobtest.Backend) {
	c := newClusterOn(t, b)
	reg := jobtest.Registry(t, recordType("record", true))
	jobs := []configs.Job{
		jobtest.CronJob("report", "record", time.Second, time.UTC, configs.Leader, configs.None),
		jobtest.CronJob("digest", "record", time.Second, time.UTC, configs.Database, configs.None),
	}
	var running []*jobtest.Node
	for _, name := range []string{"server-1", "server-2"} {
		running = append(running, c.Start(name, reg, jobs))
	}
	pool := c.RuntimePool()
	ctx := context.Background()
	ran := func(job string) map[time.Time]int {
		per := map[time.Time]int{}
		for _, e := range events(t, c, job) {
			per[e.Slot.UTC()]++
		}
		return per
	}
	c.WaitCommit("both jobs running their slots", []string{"test_events"}, func() bool {
		return len(ran("report")) > 0 && len(ran("digest")) > 0
	})
	// pauseOver pauses both jobs until two slots have fallen due, and resumes them.
	pauseOver := func(catchUp bool) []controls.Resumed {
		t.Helper()
		// Pause just after a slot, so that the instances learn of it well
		// before the next one.
		seen := len(events(t, c, "report"))
		c.WaitCommit("a slot just run", []string{"test_events"}, func() bool { return len(events(t, c, "report")) > seen })
		for _, j := range jobs {
			if _, _, err := controls.PauseJob(ctx, pool, j.Name, "alice@web1", "data migration"); err != nil {
				t.Fatal(err)
			}
		}
		var since time.Time
		if err := pool.QueryRow(ctx, `SELECT max(paused_at) FROM job_pauses`).Scan(&since); err != nil {
			t.Fatal(err)
		}
		past := since.Truncate(time.Second).Add(2 * time.Second)
		c.WaitNodes("two slots to fall due while paused", running, func() bool { return time.Now().After(past.Add(100 * time.Millisecond)) })
		var out []controls.Resumed
		for _, j := range jobs {
			r, err := controls.ResumeJob(ctx, pool, j, "bob@web2", catchUp)
			if err != nil || r.Due < 2 {
				t.Fatalf("resume %s: %+v, %v; want two slots or more due", j.Name, r, err)
			}
			out = append(out, r)
		}
		return out
	}

	skipped := pauseOver(false)
	for i, j := range jobs {
		r := skipped[i]
		c.WaitCommit(j.Name+" to run a slot after the resume", []string{"test_events"}, func() bool {
			for s := range ran(j.Name) {
				if s.After(r.Until) {
					return true
				}
			}
			return false
		})
		per := ran(j.Name)
		for s := r.First.UTC(); !s.After(r.Last); s = s.Add(time.Second) {
			if per[s] != 0 {
				t.Errorf("%s: slot %s, due while paused, ran %d times; want skipped", j.Name, s.Format(time.TimeOnly), per[s])
			}
		}
		var n int
		if err := c.DB.QueryRow(ctx, `SELECT count(*) FROM cron_slots WHERE job = $1 AND slot BETWEEN $2 AND $3
			AND state = 'skipped' AND token = 0 AND instance = '' AND error LIKE 'paused by alice@web1%'`, j.Name, r.First, r.Last).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != r.Skipped || n == 0 {
			t.Errorf("%s: %d slots recorded skipped by the resume, it said %d", j.Name, n, r.Skipped)
		}
	}

	caught := pauseOver(true)
	for i, j := range jobs {
		r := caught[i]
		c.WaitCommit(j.Name+" to catch up the slots of the second pause", []string{"test_events"}, func() bool {
			per := ran(j.Name)
			for s := r.First.UTC(); !s.After(r.Last); s = s.Add(time.Second) {
				if per[s] != 1 {
					return false
				}
			}
			return true
		})
	}
	for _, j := range jobs {
		per := ran(j.Name)
		for s, n := range per {
			if n != 1 {
				t.Errorf("%s: slot %s ran %d times", j.Name, s.Format(time.TimeOnly), n)
			}
		}
	}
}
