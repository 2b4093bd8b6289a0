package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// A singleton runs on exactly one of three instances; a job that is not a
// singleton runs on all three.
func TestSingletonRunsOnOneInstanceOthersEverywhere(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := jobtest.Registry(t, recordType("record", false))
	everywhere := configs.Job{Name: "cache-warmer", Type: "record", Grace: time.Second,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: 50 * time.Millisecond}}
	jobs := []configs.Job{jobtest.Continuous("aggregator", "record"), everywhere}
	for _, name := range []string{"server-1", "server-2", "server-3"} {
		c.Start(name, reg, jobs)
	}
	c.WaitCommit("the singleton to write and the everywhere job to run on all three", []string{"test_events"}, func() bool {
		seen := map[string]bool{}
		for _, e := range events(t, c, "cache-warmer") {
			seen[e.Instance] = true
		}
		return len(events(t, c, "aggregator")) >= 20 && len(seen) == 3
	})
	evs := checkOneWriterAtATime(t, c, "aggregator")
	leader, ok := c.Leader("aggregator")
	if !ok {
		t.Fatal("no leader key")
	}
	// One term writes at a time (checked above); on a busy machine a lease
	// may lapse and the job move, so earlier terms' rows may come first.
	for _, e := range evs {
		if e.Token <= 0 || e.Token > leader.Token || e.Token == leader.Token && e.Instance != leader.Instance {
			t.Fatalf("singleton row from %s/%d while %s/%d leads", e.Instance, e.Token, leader.Instance, leader.Token)
		}
	}
	if last := evs[len(evs)-1]; last.Token != leader.Token {
		t.Logf("the job moved while it wrote (a lease lapsed on a busy machine): last row %s/%d, leader %s/%d", last.Instance, last.Token, leader.Instance, leader.Token)
	}
	for _, e := range events(t, c, "cache-warmer") {
		if e.Token != 0 {
			t.Fatalf("a job that is not a singleton ran with token %d", e.Token)
		}
	}
}

// Killing the leader moves the job; the dead leader's token never writes again
// once the successor has. The history is closed by the successor: the dead
// term ends (expired, recorded by the successor at its start) and its run,
// still open, is cut off. On both backends.
func TestKillingTheLeaderMovesTheJob(t *testing.T) {
	t.Parallel()
	jobtest.EachBackend(t, func(t *testing.T, b jobtest.Backend) {
		c := newClusterOn(t, b)
		reg := jobtest.Registry(t, recordType("record", false))
		jobs := []configs.Job{jobtest.Continuous("aggregator", "record")}
		nodes := map[string]*jobtest.Node{}
		for _, name := range []string{"server-1", "server-2", "server-3"} {
			nodes[name] = c.Start(name, reg, jobs)
		}
		first := writingLeader(t, c, "aggregator")
		nodes[first.Instance].Crash()

		c.WaitCommit("another instance to lead and write", []string{"test_events"}, func() bool {
			l, ok := c.Leader("aggregator")
			if !ok || l.Instance == first.Instance {
				return false
			}
			evs := events(t, c, "aggregator")
			return evs[len(evs)-1].Token == l.Token
		})
		checkOneWriterAtATime(t, c, "aggregator")

		second, _ := c.Leader("aggregator")
		terms, _, err := status.History(context.Background(), c.DB, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if len(terms) != 2 || terms[0].Token != first.Token || terms[0].Instance != first.Instance ||
			terms[1].Token != second.Token || terms[1].Instance != second.Instance || terms[1].Started.Before(terms[0].Started) {
			t.Fatalf("term history %+v; want the killed term %d then %d", terms, first.Token, second.Token)
		}
		if dead := terms[0]; dead.Reason != status.EndExpired || dead.EndedBy != second.Instance || !dead.Ended.Equal(terms[1].Started) {
			t.Errorf("the killed term: %+v; want it ended (expired) by %s when its term started (%v)", dead, second.Instance, terms[1].Started)
		}
		runs, _, err := status.Runs(context.Background(), c.DB, "aggregator", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.Token == first.Token && (r.Result != "cut off" || r.Finished.IsZero()) {
				t.Errorf("the killed term's run %d: %q, finished %v; want cut off, closed by the successor", r.ID, r.Result, r.Finished)
			}
		}
	})
}

// writingLeader waits for a leader of job that knows it leads: the newest
// row its job wrote carries the leader key's token. The key alone can be an
// instance's whose campaign answer has not reached it yet; stopped or killed
// then, it never had a term.
func writingLeader(t *testing.T, c *jobtest.Cluster, job string) jobtest.Leader {
	t.Helper()
	var leader jobtest.Leader
	c.WaitCommit("a leader writing", []string{"test_events"}, func() bool {
		l, ok := c.Leader(job)
		evs := events(t, c, job)
		leader = l
		return ok && len(evs) > 0 && evs[len(evs)-1].Token == l.Token
	})
	return leader
}

// SIGTERM-style shutdown hands over at once: the successor's term starts while
// the old lease still had most of its TTL.
func TestShutdownHandsOverWithoutWaitingForExpiry(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := jobtest.Registry(t, recordType("record", false))
	jobs := []configs.Job{jobtest.Continuous("aggregator", "record")}
	slow := jobtest.WithTTL(10 * time.Second)
	nodes := map[string]*jobtest.Node{}
	for _, name := range []string{"server-1", "server-2"} {
		nodes[name] = c.Start(name, reg, jobs, slow)
	}
	first := writingLeader(t, c, "aggregator")
	ttl, err := c.Obs.TimeToLive(context.Background(), first.Lease)
	if err != nil {
		t.Fatal(err)
	}
	expiresBy := time.Now().Add(time.Duration(ttl.TTL) * time.Second)
	nodes[first.Instance].Stop()
	c.WaitKeys("the other instance to lead", func() bool {
		l, ok := c.Leader("aggregator")
		return ok && l.Instance != first.Instance
	})
	if !time.Now().Before(expiresBy) {
		t.Fatal("the successor won only when the stopped leader's lease would have expired")
	}
	checkOneWriterAtATime(t, c, "aggregator")
	var terms []status.TermRecord
	c.WaitCommit("both terms in the history", []string{"job_terms"}, func() bool {
		var err error
		terms, _, err = status.History(context.Background(), c.DB, time.Time{})
		return err == nil && len(terms) == 2
	})
	if terms[0].Token != first.Token || terms[0].Reason != "shutdown" || terms[0].Ended.IsZero() || terms[0].Ended.After(terms[1].Started) {
		t.Fatalf("term history %+v; want the stopped term %d ended by shutdown, before its successor started", terms, first.Token)
	}
}

// The leader is killed while running a cron slot: the successor runs that slot
// (and every slot that fell due meanwhile) exactly once.
func TestCronSlotAtLeaderKillRunsExactlyOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	started := make(chan time.Time, 100)
	blocking := scheduler.Type{Name: "report", New: func(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
		record := recordType("x", true)
		inner, _ := record.New(env, spec)
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			if r.Instance == "server-1" {
				started <- r.Slot
				<-ctx.Done() // killed mid-slot, before writing anything
				return ctx.Err()
			}
			return inner.Run(ctx, r)
		}), nil
	}}
	reg := jobtest.Registry(t, blocking)
	jobs := []configs.Job{jobtest.CronJob("weekly-report", "report", time.Second, time.UTC, configs.Leader, configs.Latest)}
	first := c.Start("server-1", reg, jobs)
	killedAt := <-started // server-1 leads and is inside a slot
	c.Start("server-2", reg, jobs)
	first.Crash()

	c.WaitCommit("the successor to run the killed slot and a few after it", []string{"test_events"}, func() bool {
		evs := events(t, c, "weekly-report")
		return len(evs) >= 3 && evs[len(evs)-1].Slot.After(killedAt.Add(2*time.Second))
	})
	evs := checkOneWriterAtATime(t, c, "weekly-report")
	perSlot := map[time.Time]int{}
	for _, e := range evs {
		perSlot[e.Slot.UTC()]++
	}
	if perSlot[killedAt.UTC()] != 1 {
		t.Fatalf("the slot the leader was killed in ran %d times, want 1", perSlot[killedAt.UTC()])
	}
	last := evs[len(evs)-1].Slot.UTC()
	for s := killedAt.UTC(); !s.After(last); s = s.Add(time.Second) {
		if perSlot[s] != 1 {
			t.Errorf("slot %s ran %d times, want exactly 1", s.Format(time.TimeOnly), perSlot[s])
		}
	}
}

// Database mode: three instances fire every slot; one runs it.
func TestDatabaseModeRunsEachSlotOnceAcrossThreeInstances(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := jobtest.Registry(t, recordType("record", true))
	jobs := []configs.Job{jobtest.CronJob("weekly-report", "record", time.Second, time.UTC, configs.Database, configs.Latest)}
	for _, name := range []string{"server-1", "server-2", "server-3"} {
		n := c.Start(name, reg, jobs)
		if n.Session != nil {
			t.Fatal("database mode should not need etcd")
		}
	}
	c.WaitCommit("several slots", []string{"test_events"}, func() bool { return len(events(t, c, "weekly-report")) >= 6 })
	evs := events(t, c, "weekly-report")
	perSlot := map[time.Time]int{}
	for _, e := range evs {
		perSlot[e.Slot.UTC()]++
	}
	first, last := evs[0].Slot.UTC(), evs[len(evs)-1].Slot.UTC()
	for s := first; !s.After(last); s = s.Add(time.Second) {
		if perSlot[s] != 1 {
			t.Errorf("slot %s ran %d times, want 1", s.Format(time.TimeOnly), perSlot[s])
		}
	}
}

// Slots missed while nobody led are caught up by the next leader (they fell
// due within the last minute, so they run whatever the policy).
func TestNewLeaderCatchesUpSlotsMissedWhileNobodyLed(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := jobtest.Registry(t, recordType("record", true))
	jobs := []configs.Job{jobtest.CronJob("weekly-report", "record", time.Second, time.UTC, configs.Leader, configs.None)}
	first := c.Start("server-1", reg, jobs)
	c.WaitCommit("a first slot", []string{"test_events"}, func() bool { return len(events(t, c, "weekly-report")) >= 1 })
	first.Stop()
	stoppedAfter := events(t, c, "weekly-report")
	lastBefore := stoppedAfter[len(stoppedAfter)-1].Slot.UTC()
	time.Sleep(3 * time.Second) // nobody leads for a few slots
	c.Start("server-2", reg, jobs)
	c.WaitCommit("the new leader to run the slots after the gap", []string{"test_events"}, func() bool {
		evs := events(t, c, "weekly-report")
		return !evs[len(evs)-1].Slot.Before(lastBefore.Add(3 * time.Second))
	})
	evs := events(t, c, "weekly-report")
	perSlot := map[time.Time]int{}
	for _, e := range evs {
		perSlot[e.Slot.UTC()]++
	}
	for s := lastBefore.Add(time.Second); s.Before(lastBefore.Add(3 * time.Second)); s = s.Add(time.Second) {
		if perSlot[s] != 1 {
			t.Errorf("slot %s, missed while nobody led, ran %d times; want 1", s.Format(time.TimeOnly), perSlot[s])
		}
	}
}

// Three instances, six singletons: started one after another (the first alone
// grabs everything), they settle at two each.
func TestSpreadSettlesAtTwoEach(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := jobtest.Registry(t, recordType("record", false))
	var jobs []configs.Job
	for i := range 6 {
		jobs = append(jobs, jobtest.Continuous(fmt.Sprintf("job-%d", i), "record"))
	}
	var nodes []*jobtest.Node
	for i := range 3 {
		nodes = append(nodes, c.Start(fmt.Sprintf("server-%d", i+1), reg, jobs))
		if i == 0 {
			nodes[0].Wait("the first instance to lead all six", func() bool { return nodes[0].Sched.Leading() == 6 })
		}
	}
	c.WaitNodes("two terms on each instance", nodes, func() bool {
		for _, n := range nodes {
			if n.Sched.Leading() != 2 {
				return false
			}
		}
		return true
	})
	for i := range 6 {
		checkOneWriterAtATime(t, c, fmt.Sprintf("job-%d", i))
	}
}

// A job that reports no progress for progress_timeout resigns its term;
// another instance takes it over.
func TestWedgedJobTriggersTheWatchdog(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	wedged := scheduler.Type{Name: "wedged", New: func(scheduler.Env, configs.Job) (scheduler.Job, error) {
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			if r.Instance == "server-1" {
				<-ctx.Done() // stuck, never calls Progress
				return ctx.Err()
			}
			for {
				r.Progress()
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(20 * time.Millisecond):
				}
			}
		}), nil
	}}
	job := jobtest.Continuous("aggregator", "wedged")
	job.ProgressTimeout = 300 * time.Millisecond
	reg := jobtest.Registry(t, wedged)
	one := c.Start("server-1", reg, []configs.Job{job})
	c.WaitKeys("server-1 to lead", func() bool { l, ok := c.Leader("aggregator"); return ok && l.Instance == "server-1" })
	c.Start("server-2", reg, []configs.Job{job})
	c.WaitKeys("the watchdog to move the job to server-2", func() bool {
		l, ok := c.Leader("aggregator")
		return ok && l.Instance == "server-2"
	})
	if got := one.MetricSum(t, "snip_jobs_watchdog_resignations_total"); got < 1 {
		t.Fatalf("watchdog resignations on server-1 = %v", got)
	}
}

// A panic is recovered, logged, and ends the term by resignation.
func TestPanicEndsTheTermByResignation(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	panicky := scheduler.Type{Name: "panicky", New: func(scheduler.Env, configs.Job) (scheduler.Job, error) {
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			if r.Instance == "server-1" {
				panic("boom")
			}
			<-ctx.Done()
			return nil
		}), nil
	}}
	reg := jobtest.Registry(t, panicky)
	jobs := []configs.Job{jobtest.Continuous("aggregator", "panicky")}
	slow := jobtest.WithTTL(30 * time.Second) // a hand-over by expiry would take 30 s
	one := c.Start("server-1", reg, jobs, slow)
	one.Wait("server-1 to panic once", func() bool {
		return one.MetricSum(t, "snip_jobs_runs_total") >= 1
	})
	c.Start("server-2", reg, jobs, slow)
	c.WaitKeys("server-2 to take over after the resignation", func() bool {
		l, ok := c.Leader("aggregator")
		return ok && l.Instance == "server-2"
	})
}

// An operator's resign request moves the job to another instance.
func TestResignRequestMovesTheLeader(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := jobtest.Registry(t, recordType("record", false))
	jobs := []configs.Job{jobtest.Continuous("aggregator", "record")}
	nodes := []*jobtest.Node{c.Start("server-1", reg, jobs), c.Start("server-2", reg, jobs)}
	c.WaitNodes("one leader and one instance waiting", nodes, func() bool {
		_, ok := c.Leader("aggregator")
		return ok && nodes[0].Session.Stats().Waiting+nodes[1].Session.Stats().Waiting == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), jobtest.Patience)
	defer cancel()
	before, after, err := leadership.Resign(ctx, etcdlease.NewCluster(c.Obs, c.Prefix), "aggregator")
	if err != nil {
		t.Fatal(err)
	}
	if after == nil || after.Token <= before.Token || after.Instance == before.Instance {
		t.Fatalf("after the resign request: before %+v, after %+v", before, after)
	}
	if _, _, err := leadership.Resign(ctx, etcdlease.NewCluster(c.Obs, c.Prefix), "no-such-job"); !errors.Is(err, leadership.ErrNoLeader) {
		t.Fatalf("resign of a job without leader: %v", err)
	}
	checkOneWriterAtATime(t, c, "aggregator")
}

// A job that ignores its context is waited for only its grace period: the
// overrun is counted and the job is handed over anyway.
func TestAJobThatOverrunsItsTermIsCountedAndHandedOver(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	release, running := make(chan struct{}), make(chan struct{}, 1)
	defer close(release)
	stubborn := scheduler.Type{Name: "stubborn", New: func(scheduler.Env, configs.Job) (scheduler.Job, error) {
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			if r.Instance == "server-1" {
				running <- struct{}{}
				<-release // ignores ctx
				return nil
			}
			<-ctx.Done()
			return nil
		}), nil
	}}
	job := jobtest.Continuous("aggregator", "stubborn")
	job.Grace = 200 * time.Millisecond
	reg := jobtest.Registry(t, stubborn)
	one := c.Start("server-1", reg, []configs.Job{job})
	<-running // server-1 leads and its job is in progress
	two := c.Start("server-2", reg, []configs.Job{job})
	two.Wait("server-2 to wait for the job", func() bool { return two.Session.Stats().Waiting == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), jobtest.Patience)
	defer cancel()
	if _, after, err := leadership.Resign(ctx, etcdlease.NewCluster(c.Obs, c.Prefix), "aggregator"); err != nil || after == nil || after.Instance != "server-2" {
		t.Fatalf("resign request: after %+v, err %v; want server-2 to lead while server-1's job still runs", after, err)
	}
	if got := one.MetricSum(t, "snip_jobs_overruns_total"); got != 1 {
		t.Fatalf("overruns on server-1 = %v, want 1", got)
	}
}

// Instances that lead equally many terms take over a crashed leader's job
// without the spread hold-back: it is for instances that lead more than others.
func TestEquallyLoadedInstancesTakeOverWithoutHoldingBack(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	reg := jobtest.Registry(t, recordType("record", false))
	var jobs []configs.Job
	for i := range 3 {
		jobs = append(jobs, jobtest.Continuous(fmt.Sprintf("job-%d", i), "record"))
	}
	nodes := map[string]*jobtest.Node{}
	for i := range 3 {
		name := fmt.Sprintf("server-%d", i+1)
		nodes[name] = c.Start(name, reg, jobs)
	}
	c.WaitNodes("one term on each instance", slices.Collect(maps.Values(nodes)), func() bool {
		for _, n := range nodes {
			if n.Sched.Leading() != 1 {
				return false
			}
		}
		return true
	})
	victim, _ := c.Leader("job-0")
	// Only job-0's campaigns count: once it is taken over, its new leader leads
	// more than the other survivor and rightly holds back on the other jobs.
	holdbacks := func(n *jobtest.Node) float64 {
		return n.MetricSum(t, "snip_jobs_spread_holdbacks_total", "job", "job-0")
	}
	before := map[string]float64{}
	for name, n := range nodes {
		before[name] = holdbacks(n)
	}
	nodes[victim.Instance].Crash()
	c.WaitKeys("job-0 to be taken over", func() bool {
		l, ok := c.Leader("job-0")
		return ok && l.Instance != victim.Instance
	})
	for name, n := range nodes {
		if name != victim.Instance && holdbacks(n) != before[name] {
			t.Errorf("%s held back while taking over from a crashed instance it was as loaded as", name)
		}
	}
}

// The job_runs record of a run is bookkeeping: a database slow to take it (here,
// job_runs locked by an operator's transaction) never holds a term's end
// past the job's return. The job returns at once when its term ends, so the
// hand-overs below see no overrun, whether the run's start or its end is the
// record waiting; the end is written once the table is free again (the job
// returned nil: "ok").
func TestRecordingARunNeverHoldsTheEndOfItsTerm(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	patient := scheduler.Type{Name: "patient", New: func(scheduler.Env, configs.Job) (scheduler.Job, error) {
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			<-ctx.Done()
			return nil
		}), nil
	}}
	job := jobtest.Continuous("aggregator", "patient")
	job.Grace = 2 * time.Second // below the 5 s a job_runs write may take
	reg := jobtest.Registry(t, patient)
	ctx, cancel := context.WithTimeout(context.Background(), jobtest.Patience)
	defer cancel()
	lockRuns := func() pgx.Tx {
		t.Helper()
		tx, err := c.DB.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Rolled back before the pool closes, should the test fail.
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		// Reads go on; writes wait.
		if _, err := tx.Exec(ctx, `LOCK TABLE job_runs IN EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	resign := func(from string) {
		t.Helper()
		before, after, err := leadership.Resign(ctx, etcdlease.NewCluster(c.Obs, c.Prefix), "aggregator")
		if err != nil || before.Instance != from || after == nil || after.Instance == from {
			t.Fatalf("resign request: before %+v, after %+v, err %v; want the job moved away from %s", before, after, err, from)
		}
	}
	overruns := func(nodes ...*jobtest.Node) (n float64) {
		for _, node := range nodes {
			n += node.MetricSum(t, "snip_jobs_overruns_total")
		}
		return n
	}

	// The start of server-1's run waits for the table when its term ends.
	lock := lockRuns()
	one := c.Start("server-1", reg, []configs.Job{job})
	c.WaitKeys("server-1 to lead", func() bool { l, ok := c.Leader("aggregator"); return ok && l.Instance == "server-1" })
	two := c.Start("server-2", reg, []configs.Job{job})
	two.Wait("server-2 to wait for the job", func() bool { return two.Session.Stats().Waiting == 1 })
	resign("server-1")
	if got := overruns(one, two); got != 0 {
		t.Fatalf("overruns = %v with the start of a run waiting on job_runs, want 0", got)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Server-2's run has been recorded; the end of that run waits for the table.
	var id int64
	c.WaitCommit("server-2's run to be recorded", []string{"job_runs"}, func() bool {
		return c.DB.QueryRow(ctx, `SELECT id FROM job_runs WHERE job = 'aggregator' AND instance = 'server-2' AND finished_at IS NULL`).Scan(&id) == nil
	})
	one.Wait("server-1 to wait for the job", func() bool { return one.Session.Stats().Waiting == 1 })
	lock = lockRuns()
	resign("server-2")
	if got := overruns(one, two); got != 0 {
		t.Fatalf("overruns = %v with the end of a run waiting on job_runs, want 0", got)
	}
	var result *string
	if err := c.DB.QueryRow(ctx, `SELECT result FROM job_runs WHERE id = $1`, id).Scan(&result); err != nil || result != nil {
		t.Fatalf("run %d: result %v, err %v; want none yet: job_runs is locked", id, result, err)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	c.WaitCommit("server-2's run to be recorded as finished", []string{"job_runs"}, func() bool {
		return c.DB.QueryRow(ctx, `SELECT result FROM job_runs WHERE id = $1`, id).Scan(&result) == nil && result != nil && *result == "ok"
	})
}

// A cron run that returns when its term ends still has its slot's outcome
// recorded, but within half its grace: a database slow to take that write
// (here, the slot's row locked by an operator's transaction) does not hold the
// hand-over past the grace. The slot stays open and the successor runs it.
func TestRecordingASlotsOutcomeNeverHoldsTheEndOfItsTerm(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	slots := make(chan time.Time, 100)
	patient := scheduler.Type{Name: "patient", New: func(scheduler.Env, configs.Job) (scheduler.Job, error) {
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			if r.Instance != "server-1" {
				return nil // done at once
			}
			slots <- r.Slot
			<-ctx.Done()
			return nil // stopped cleanly: the scheduler records the slot done
		}), nil
	}}
	job := jobtest.CronJob("weekly-report", "patient", time.Second, time.UTC, configs.Leader, configs.Latest)
	job.Grace = 4 * time.Second // the outcome may take 2 s of it; unbounded, the write would wait 10 s
	reg := jobtest.Registry(t, patient)
	one := c.Start("server-1", reg, []configs.Job{job})
	slot := <-slots // server-1 leads and runs a slot
	two := c.Start("server-2", reg, []configs.Job{job})
	two.Wait("server-2 to wait for the job", func() bool { return two.Session.Stats().Waiting == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), jobtest.Patience)
	defer cancel()
	lock, err := c.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(context.Background()) }) // before the pool closes, should the test fail
	var state string
	if err := lock.QueryRow(ctx, `SELECT state FROM cron_slots WHERE job = 'weekly-report' AND slot = $1 FOR UPDATE`, slot).Scan(&state); err != nil || state != "running" {
		t.Fatalf("slot %v: state %q, err %v; want it running", slot, state, err)
	}

	before, after, err := leadership.Resign(ctx, etcdlease.NewCluster(c.Obs, c.Prefix), "weekly-report")
	if err != nil || before.Instance != "server-1" || after == nil || after.Instance != "server-2" {
		t.Fatalf("resign request: before %+v, after %+v, err %v; want the job moved to server-2", before, after, err)
	}
	if got := one.MetricSum(t, "snip_jobs_overruns_total"); got != 0 {
		t.Fatalf("overruns on server-1 = %v with its slot's outcome waiting on the row, want 0", got)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	c.WaitCommit("server-2 to run the slot server-1 left open", []string{"cron_slots"}, func() bool {
		var instance string
		err := c.DB.QueryRow(ctx, `SELECT instance FROM cron_slots WHERE job = 'weekly-report' AND slot = $1 AND state = 'done'`, slot).Scan(&instance)
		return err == nil && instance == "server-2"
	})
}
