package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// manualType is a job whose runs of the schedule do nothing and whose
// manual runs write one row (job, instance, token) and complete their
// request in the same fenced transaction (a job that runs everywhere writes
// its row plainly). With hold, the first manual run that gets inside its
// transaction says so on inTx and waits there for the test's gate
// (closedGate), its context ignored: the transaction is active meanwhile,
// not idle, so that only a newer term's fence ends it, not PostgreSQL's
// idle timeout on a slow machine.
func manualType(hold bool, inTx chan<- string) scheduler.Type {
	var inside atomic.Int64
	return scheduler.Type{Name: "manual", New: func(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			if r.ManualRun == 0 {
				return nil
			}
			if r.Token == 0 {
				_, err := env.Pool.Exec(ctx, `INSERT INTO test_events (job, instance, token) VALUES ($1, $2, 0)`, r.Job, r.Instance)
				return err
			}
			return r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO test_events (job, instance, token) VALUES ($1, $2, $3)`, r.Job, r.Instance, r.Token); err != nil {
					return err
				}
				if hold && inside.Add(1) == 1 {
					inTx <- r.Instance
					// Its term ends meanwhile: it ignores that.
					if _, err := tx.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_xact_lock_shared($1)`, gateKey); err != nil {
						return err
					}
				}
				return r.Complete(ctx, tx)
			})
		}), nil
	}}
}

// gateKey is the advisory lock a held manual run waits for.
const gateKey = 7321

// closedGate holds the gate (manualType) until open is called.
func closedGate(t *testing.T, c *jobtest.Cluster) (open func()) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), c.URL)
	if err == nil {
		_, err = conn.Exec(context.Background(), `SELECT pg_advisory_lock($1)`, gateKey)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return func() { conn.Close(context.Background()) }
}

// recvInTx waits for the instance whose manual run is held inside its transaction.
func recvInTx(t *testing.T, inTx <-chan string) string {
	t.Helper()
	select {
	case in := <-inTx:
		return in
	case <-time.After(jobtest.Patience):
		t.Fatal("no manual run got inside its transaction")
	}
	return ""
}

func hourly(name, typ string, singleton bool) configs.Job {
	return configs.Job{Name: name, Type: typ, Singleton: singleton, Grace: 2 * time.Second,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Hour}}
}

// await waits for manual run id to be over.
func await(t *testing.T, c *jobtest.Cluster, id int64) controls.ManualRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), jobtest.Patience)
	defer cancel()
	pool := c.RuntimePool()
	m, err := controls.Await(ctx, pool.Config().ConnConfig, pool, id)
	if err != nil {
		t.Fatalf("manual run %d: %v (last read %+v)", id, err, m)
	}
	return m
}

// Six operators ask for a run of a singleton at once, while the first one
// asked for runs: one request, the five others joined to it, run once by the
// leader with its term's token, recorded in job_runs as manual (the history
// shows it), its request done with that run.
func TestConcurrentManualRunsOfASingletonRunOnceByItsLeader(t *testing.T) {
	t.Parallel()
	jobtest.EachBackend(t, concurrentManualRunsOfASingletonRunOnceByItsLeader)
}

func concurrentManualRunsOfASingletonRunOnceByItsLeader(t *testing.T, b jobtest.Backend) {
	c := newClusterOn(t, b)
	open, inTx := closedGate(t, c), make(chan string, 1)
	reg := jobtest.Registry(t, manualType(true, inTx))
	jobs := []configs.Job{hourly("heartbeat", "manual", true)}
	for _, name := range []string{"server-1", "server-2"} {
		c.Start(name, reg, jobs)
	}
	c.WaitKeys("a leader", func() bool { _, ok := c.Leader("heartbeat"); return ok })
	pool := c.RuntimePool()
	var mu sync.Mutex
	ids, joined := map[int64]bool{}, 0
	var wg sync.WaitGroup
	request := func(i int) {
		m, j, err := controls.RequestRun(context.Background(), pool, jobs[0], fmt.Sprintf("op-%d@web1", i))
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		ids[m.ID] = true
		if j {
			joined++
		}
	}
	for i := range 6 {
		wg.Go(func() { request(i) })
	}
	runner := recvInTx(t, inTx) // the leader runs the request: those made since joined it
	wg.Wait()
	open()
	if len(ids) != 1 || joined != 5 {
		t.Fatalf("six requests at once: ids %v, %d joined; want one, five joined", ids, joined)
	}
	var id int64
	for id = range ids {
	}
	m := await(t, c, id)
	if m.State != controls.StateDone || m.Result != "ok" || m.Instance != runner || m.Attempts != 1 ||
		false {
		t.Errorf("manual run %+v; want done once by %s", m, runner)
	}
	var termOf string
	if err := c.DB.QueryRow(context.Background(), `SELECT instance FROM job_terms WHERE job = 'heartbeat' AND token = $1`, m.Token).Scan(&termOf); err != nil || termOf != runner {
		t.Errorf("token %d is a term of %q (%v); want %s's", m.Token, termOf, err, runner)
	}
	evs := events(t, c, "heartbeat")
	if len(evs) != 1 || evs[0].Token != m.Token {
		t.Errorf("rows written: %+v; want one, by the leader's term %d", evs, m.Token)
	}
	// The run's end is recorded after the request's completion commits.
	var manual []status.RunRecord
	c.WaitCommit("the manual run's end in the history", []string{"job_runs"}, func() bool {
		runs, _, err := status.Runs(context.Background(), c.DB, "heartbeat", 10)
		if err != nil {
			t.Fatal(err)
		}
		manual = nil
		for _, r := range runs {
			if r.Trigger == string(scheduler.TriggerManual) {
				manual = append(manual, r)
			}
		}
		return len(manual) > 0 && !manual[0].Finished.IsZero()
	})
	if len(manual) != 1 || manual[0].ID != m.RunID || manual[0].Result != "ok" || manual[0].Token != m.Token {
		t.Errorf("the history's manual runs %+v; want the one run %d, ok", manual, m.RunID)
	}
}

// The leader running a manual run loses its lease in the middle (revoked
// in etcd, its instance Lease deleted on Kubernetes: as the backend sees a
// killed leader), while its run sits inside its fenced transaction ignoring
// its context: the next leader takes the request over (a running one
// claimed with an older token), its fenced claim ends the old term's
// transaction, which held the resource, and it runs the request once. The old run's write is refused (rolled back with its
// transaction), one completion is recorded, one row written: the new
// term's.
func TestAManualRunCutShortByItsLeadersEndCompletesOnceUnderTheNext(t *testing.T) {
	t.Parallel()
	jobtest.EachBackend(t, aManualRunCutShortByItsLeadersEndCompletesOnceUnderTheNext)
}

func aManualRunCutShortByItsLeadersEndCompletesOnceUnderTheNext(t *testing.T, b jobtest.Backend) {
	c := newClusterOn(t, b)
	open, inTx := closedGate(t, c), make(chan string, 1)
	reg := jobtest.Registry(t, manualType(true, inTx))
	jobs := []configs.Job{hourly("heartbeat", "manual", true)}
	ns := map[string]*jobtest.Node{}
	for _, name := range []string{"server-1", "server-2"} {
		ns[name] = c.Start(name, reg, jobs)
	}
	c.WaitKeys("a leader", func() bool { _, ok := c.Leader("heartbeat"); return ok })
	m, _, err := controls.RequestRun(context.Background(), c.RuntimePool(), jobs[0], "alice@web1")
	if err != nil {
		t.Fatal(err)
	}
	first := recvInTx(t, inTx) // the leader's run is inside its transaction
	old, _ := c.Leader("heartbeat")
	if old.Instance != first {
		t.Fatalf("%s runs the manual run, %s leads", first, old.Instance)
	}
	c.Revoke(old.Instance)
	done := await(t, c, m.ID)
	open() // the old run, if still waiting, finds its transaction ended
	// A second claim at least; a third when a lease lapsed on a busy machine.
	if done.State != controls.StateDone || done.Token <= old.Token || done.Attempts < 2 {
		t.Errorf("manual run %+v; want done by a term after %d, on its second claim or later", done, old.Token)
	}
	evs := events(t, c, "heartbeat")
	if len(evs) != 1 || evs[0].Token != done.Token || evs[0].Instance != done.Instance {
		t.Errorf("rows written: %+v; want one, by the term that completed the run (%s, %d)", evs, done.Instance, done.Token)
	}
	// The fence reports a holder it ended once its query's answer is read,
	// which may be after the write it unblocked has committed.
	jobtest.Eventually(t, "the old term's transaction ended by the next term's fence (snip_jobs_fence_stale_holders_ended_total)", func() bool {
		ended := 0.0
		for _, n := range ns {
			ended += n.MetricSum(t, "snip_jobs_fence_stale_holders_ended_total")
		}
		return ended >= 1
	})
}

// A job that runs everywhere runs a manual run once on every instance: the
// request closes once each has reported.
func TestAManualRunOfAJobThatRunsEverywhereRunsOnceOnEachInstance(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := jobtest.Registry(t, manualType(false, nil))
	jobs := []configs.Job{hourly("warm-caches", "manual", false)}
	names := []string{"server-1", "server-2"}
	var started []*jobtest.Node
	for _, name := range names {
		started = append(started, c.Start(name, reg, jobs))
	}
	pool := c.RuntimePool()
	// The instances are up, as the database sees them, once their feeds are connected.
	c.WaitNodes("every instance's controls read", started, func() bool {
		for _, n := range started {
			if n.Sched.ControlsRead() != nil {
				return false
			}
		}
		return true
	})
	m, _, err := controls.RequestRun(context.Background(), pool, jobs[0], "alice@web1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Expected, names) {
		t.Errorf("expected instances %v; want %v", m.Expected, names)
	}
	done := await(t, c, m.ID)
	var ran []string
	for _, r := range done.Reports {
		if r.Result == "ok" && !r.Finished.IsZero() && r.RunID != 0 {
			ran = append(ran, r.Instance)
		}
	}
	if done.State != controls.StateDone || !slices.Equal(ran, names) {
		t.Errorf("manual run %+v; want done, run ok on %v", done, names)
	}
	per := map[string]int{}
	for _, e := range events(t, c, "warm-caches") {
		per[e.Instance]++
	}
	for _, name := range names {
		if per[name] != 1 {
			t.Errorf("%s ran the manual run %d times; want once", name, per[name])
		}
	}
}

// A database-mode job's manual run is claimed like a slot: by one instance,
// with a claim token from cron_claim_tokens.
func TestAManualRunOfADatabaseModeJobIsClaimedByOneInstance(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := jobtest.Registry(t, manualType(false, nil))
	jobs := []configs.Job{jobtest.CronJob("digest", "manual", time.Hour, time.UTC, configs.Database, configs.None)}
	for _, name := range []string{"server-1", "server-2"} {
		c.Start(name, reg, jobs)
	}
	m, _, err := controls.RequestRun(context.Background(), c.RuntimePool(), jobs[0], "alice@web1")
	if err != nil {
		t.Fatal(err)
	}
	done := await(t, c, m.ID)
	evs := events(t, c, "digest")
	if done.State != controls.StateDone || done.Mode != "database" || done.Token <= 0 || len(evs) != 1 ||
		evs[0].Token != done.Token || evs[0].Instance != done.Instance {
		t.Errorf("manual run %+v, rows %+v; want done once, by the instance that claimed it", done, evs)
	}
}

// Draining an instance hands every singleton it leads over at once (terms
// ended "drained"); it takes none back while drained — nor does the other
// instance, which leads them all, hand any over to it (a drained instance
// is no candidate for the spread) — while its job that runs everywhere goes
// on. Undrained, it gets its share back.
func TestADrainedInstanceHandsItsSingletonsOverAndTakesNoneUntilUndrained(t *testing.T) {
	t.Parallel()
	jobtest.EachBackend(t, aDrainedInstanceHandsItsSingletonsOverAndTakesNoneUntilUndrained)
}

func aDrainedInstanceHandsItsSingletonsOverAndTakesNoneUntilUndrained(t *testing.T, backend jobtest.Backend) {
	c := newClusterOn(t, backend)
	reg := jobtest.Registry(t, recordType("record", false))
	var jobs []configs.Job
	for i := range 4 {
		jobs = append(jobs, jobtest.Continuous(fmt.Sprintf("job-%d", i), "record"))
	}
	jobs = append(jobs, configs.Job{Name: "warmer", Type: "record", Grace: time.Second,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: 200 * time.Millisecond}})
	a, b := c.Start("server-a", reg, jobs), c.Start("server-b", reg, jobs)
	both := []*jobtest.Node{a, b}
	c.WaitNodes("two singletons each", both, func() bool { return a.Sched.Leading() == 2 && b.Sched.Leading() == 2 })
	rebalances := func() float64 { return b.MetricSum(t, "snip_jobs_term_ends_total", "reason", status.EndRebalance) }
	before := rebalances()

	if _, _, err := controls.DrainInstance(context.Background(), c.RuntimePool(), "server-a", "alice@web1", "kernel upgrade"); err != nil {
		t.Fatal(err)
	}
	c.WaitNodes("server-b to lead all four", both, func() bool { return a.Sched.Leading() == 0 && b.Sched.Leading() == 4 })
	if n := a.MetricSum(t, "snip_jobs_term_ends_total", "reason", status.EndDrained); n != 2 {
		t.Errorf("%v terms of server-a ended drained; want its two", n)
	}
	warmed := func() int {
		n := 0
		for _, e := range events(t, c, "warmer") {
			if e.Instance == "server-a" {
				n++
			}
		}
		return n
	}
	runs := warmed()
	waitRenewIntervals(c, both, 6) // two spread periods or more
	if a.Sched.Leading() != 0 || b.Sched.Leading() != 4 || rebalances() != before {
		t.Errorf("while server-a is drained: it leads %d, server-b %d, with %v hand-overs; want 0, 4 and none",
			a.Sched.Leading(), b.Sched.Leading(), rebalances()-before)
	}
	if got := a.MetricSum(t, "snip_jobs_instance_drained"); got != 1 {
		t.Errorf("snip_jobs_instance_drained on server-a = %v, want 1", got)
	}
	c.WaitCommit("server-a's job that runs everywhere to go on", []string{"test_events"}, func() bool { return warmed() > runs })

	if _, _, err := controls.UndrainInstance(context.Background(), c.RuntimePool(), "server-a"); err != nil {
		t.Fatal(err)
	}
	c.WaitNodes("two singletons each again", both, func() bool { return a.Sched.Leading() == 2 && b.Sched.Leading() == 2 })
	for _, j := range jobs[:4] {
		checkOneWriterAtATime(t, c, j.Name)
	}
}
