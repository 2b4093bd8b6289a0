package controls_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }

// startFeed runs a feed on the database at url until the end of the test.
func startFeed(t *testing.T, url string, resync time.Duration) *controls.Feed {
	t.Helper()
	pool := dbtest.Pool(t, url)
	f, err := controls.NewFeed(controls.FeedConfig{DB: pool.Config().ConnConfig, Instance: "server-1", Resync: resync, Log: benchtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// waitFeed waits until cond holds of the feed's state, woken by its reads.
func waitFeed(t *testing.T, f *controls.Feed, what string, cond func(controls.State) bool) {
	t.Helper()
	benchtest.WaitChange(t, what, f.Changed, func() bool {
		st, read := f.Current()
		return read && cond(st)
	})
}

// An instance's feed reads a pause at its commit (the notification), not
// only at its next resync: with a resync far longer than the test, the
// pause is read by the read the notification started. A change that is
// notified to nobody (the trigger disabled) is read by the next resync: at
// most the read in progress and the one after it. After its connection is
// cut, the feed reconnects and reads everything again.
func TestTheFeedReadsAChangeAtItsCommitAndAMissedOneAtTheNextResync(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	pool := dbtest.Pool(t, db.Runtime)
	ctx := context.Background()

	slow := startFeed(t, db.Runtime, time.Hour)
	waitFeed(t, slow, "the first read", func(controls.State) bool { return true })
	if !slow.Up() {
		t.Error("the feed is not up after its first read")
	}
	before := slow.Reads()
	if _, _, err := controls.PauseJob(ctx, pool, "report", "alice@web1", "mail server moves"); err != nil {
		t.Fatal(err)
	}
	waitFeed(t, slow, "the pause, read at its notification", func(st controls.State) bool {
		p, ok := st.Paused("report")
		return ok && p.By == "alice@web1" && p.Reason == "mail server moves"
	})
	if n := slow.Reads() - before; n != 1 {
		t.Errorf("%d reads to see the pause; want the one its notification started (resync is an hour)", n)
	}

	fast := startFeed(t, db.Runtime, 100*time.Millisecond)
	waitFeed(t, fast, "the first read", func(controls.State) bool { return true })
	dbtest.Exec(t, db.Owner, `ALTER TABLE instance_drains DISABLE TRIGGER instance_drains_notify`)
	dbtest.Exec(t, db.Owner, `INSERT INTO instance_drains (instance, drained_by) VALUES ('server-2', 'bob@web2')`)
	// The second read to finish after the commit began after it: it sees
	// the drain (the first may have been in progress at the commit).
	committed := fast.Reads()
	benchtest.WaitChange(t, "two reads after the drain's commit", fast.Changed, func() bool { return fast.Reads() >= committed+2 })
	if st, _ := fast.Current(); len(st.Drains) == 0 {
		t.Error("the second read after the commit of a drain nobody was told of did not see it; want it seen by the next resync")
	}
	if _, ok := slow.Current(); !ok {
		t.Fatal("the slow feed has no state")
	}
	if st, _ := slow.Current(); len(st.Drains) != 0 {
		t.Errorf("the feed resyncing every hour saw the drain nobody notified: %+v", st.Drains)
	}

	// Cut the slow feed's connection: it reconnects and reads everything
	// again, the drain nobody was told of included.
	benchtest.Exec(t, pool, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, controls.AppName("server-1"))
	waitFeed(t, slow, "the reconnected feed's read", func(st controls.State) bool {
		_, ok := st.Drained("server-2")
		return ok && slow.Up()
	})
}

// A manual run asked for while one of the job is open joins it: eight at
// once make one request, seven of them joined. A continuous job is refused,
// and so is a paused one, naming who paused it.
func TestRequestsForOneJobJoinTheOpenOneAndContinuousOrPausedJobsAreRefused(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	pool := dbtest.Pool(t, db.Runtime)
	ctx := context.Background()
	spec := configs.Job{Name: "heartbeat", Type: "sql", Singleton: true, Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Hour}}

	var mu sync.Mutex
	ids, joined := map[int64]int{}, 0
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			m, j, err := controls.RequestRun(ctx, pool, spec, "op"+string(rune('a'+i)))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[m.ID]++
			if j {
				joined++
			}
		})
	}
	wg.Wait()
	if len(ids) != 1 || joined != 7 {
		t.Errorf("eight requests at once made requests %v, %d joined; want one request, seven joined", ids, joined)
	}
	st, err := controls.Read(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := st.Open["heartbeat"]; !ok || r.State != controls.StatePending || r.Mode != "leader" {
		t.Errorf("open request of heartbeat: %+v, %v; want one pending, mode leader", r, ok)
	}

	cont := jobtest.Continuous("aggregator", "aggregator")
	if _, _, err := controls.RequestRun(ctx, pool, cont, "alice@web1"); !errors.Is(err, controls.ErrContinuous) {
		t.Errorf("a continuous job: %v; want ErrContinuous", err)
	}
	if _, _, err := controls.PauseJob(ctx, pool, "report", "alice@web1", "mail server moves"); err != nil {
		t.Fatal(err)
	}
	report := jobtest.CronJob("report", "weeklyreport", time.Minute, time.UTC, configs.Leader, configs.Latest)
	_, _, err = controls.RequestRun(ctx, pool, report, "bob@web2")
	var paused *controls.PausedError
	if !errors.As(err, &paused) || paused.Pause.By != "alice@web1" || !strings.Contains(err.Error(), "snip-jobs resume report") {
		t.Errorf("a paused job: %v; want a PausedError naming alice@web1 and the resume", err)
	}
}

// Resume records the cron slots that fell due while the job was paused as
// skipped (token 0, no instance, an error naming who paused and resumed it),
// in the transaction that lifts the pause, leaving a slot already recorded
// as it was; with catch-up it records none.
func TestResumeRecordsTheSlotsDueWhilePausedAsSkippedUnlessCatchUp(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	pool := dbtest.Pool(t, db.Runtime)
	ctx := context.Background()
	report := jobtest.CronJob("report", "weeklyreport", time.Minute, time.UTC, configs.Leader, configs.All)
	owner := dbtest.Pool(t, db.Owner)

	pauseFor := func(d time.Duration) controls.Pause {
		t.Helper()
		p, _, err := controls.PauseJob(ctx, pool, "report", "alice@web1", "mail server moves")
		if err != nil {
			t.Fatal(err)
		}
		benchtest.Exec(t, owner, `UPDATE job_pauses SET paused_at = paused_at - make_interval(secs => $1)`, d.Seconds())
		return p
	}
	pauseFor(10*time.Minute + 30*time.Second)
	// A slot the leader ran before it learned of the pause.
	var first time.Time
	if err := pool.QueryRow(ctx, `SELECT date_trunc('minute', paused_at) + interval '1 minute' FROM job_pauses`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	benchtest.Exec(t, pool, `INSERT INTO cron_slots (job, slot, state, token, instance, finished_at) VALUES ('report', $1, 'done', 7, 'server-1', now())`, first)
	r, err := controls.ResumeJob(ctx, pool, report, "bob@web2", false)
	if err != nil {
		t.Fatal(err)
	}
	if !r.WasPaused || r.Due < 10 || r.Due > 11 || r.Skipped != r.Due-1 || !r.First.Equal(first) {
		t.Errorf("resumed %+v; want 10 or 11 slots due from %v, all but the done one skipped", r, first)
	}
	var skipped, other int
	var text string
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'skipped' AND token = 0 AND instance = ''),
		count(*) FILTER (WHERE NOT (state = 'skipped' AND token = 0 AND instance = '')), max(error)
		FROM cron_slots WHERE job = 'report'`).Scan(&skipped, &other, &text); err != nil {
		t.Fatal(err)
	}
	if skipped != r.Skipped || other != 1 || !strings.Contains(text, "paused by alice@web1") || !strings.Contains(text, "mail server moves") ||
		!strings.Contains(text, "resume by bob@web2") {
		t.Errorf("cron_slots: %d skipped by the resume, %d others, error %q", skipped, other, text)
	}
	if st, _ := controls.Read(ctx, pool); len(st.Pauses) != 0 {
		t.Errorf("still paused after the resume: %+v", st.Pauses)
	}
	if r, err := controls.ResumeJob(ctx, pool, report, "bob@web2", false); err != nil || r.WasPaused {
		t.Errorf("a second resume: %+v, %v; want nothing done", r, err)
	}

	// The second pause spans slots of another job's schedule (every 20 s):
	// none of them is recorded with catch-up.
	pauseFor(5*time.Minute + 30*time.Second)
	often := report
	often.Schedule.Spec = jobtest.Grid(20 * time.Second)
	r, err = controls.ResumeJob(ctx, pool, often, "bob@web2", true)
	if err != nil || !r.WasPaused || r.Due < 16 || r.Skipped != 0 {
		t.Errorf("resumed with catch-up: %+v, %v; want 16 or 17 slots due, none recorded", r, err)
	}
	if n := benchtest.Value[int64](t, pool, `SELECT count(*) FROM cron_slots WHERE extract(second FROM slot) <> 0`); n != 0 {
		t.Errorf("%d slots of the second pause recorded; with catch-up, none", n)
	}
}
