package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/slots"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// claimTestTTL is the database-mode claim TTL of these tests: extended every
// second.
const claimTestTTL = 3 * time.Second

// dbModeInstance is the slots of one instance running the database-mode cron job "report"
// (every five minutes) whose code is run. The job's history starts at 07:55
// (the first instance records it), so the 08:00 slot is its to run.
func dbModeInstance(t *testing.T, pool *pgxpool.Pool, instance string, run JobFunc) *slots.Cron {
	t.Helper()
	reg, _ := NewRegistry(Type{Name: "job", New: func(Env, configs.Job) (Job, error) { return run, nil }})
	spec := configs.Job{Name: "report", Type: "job", Singleton: true, Grace: time.Second, Schedule: configs.Schedule{
		Kind: configs.Cron, Spec: fiveMinutes{}, Location: time.UTC, Coordination: configs.Database,
		CatchUp: configs.Latest, CatchUpWindow: 24 * time.Hour}}
	s, err := New(Config{File: &configs.File{Instance: instance, Jobs: []configs.Job{spec}}, Registry: reg, Pool: pool, ClaimTTL: claimTestTTL})
	if err != nil {
		t.Fatal(err)
	}
	benchtest.Exec(t, pool, `INSERT INTO cron_slots (job, slot, state, token, instance)
		VALUES ('report', $1, 'done', 0, 'server-0') ON CONFLICT DO NOTHING`, slot08.Add(-5*time.Minute))
	return s.run.databaseCron(s.jobs[0])
}

// slot08 is the slot these tests run, swept ten seconds after it fell due.
var (
	slot08  = time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	sweep08 = slot08.Add(10 * time.Second)
)

// A database-mode run that lasts several claim TTLs keeps its slot: its
// instance extends the claim while it runs, so another instance sweeping
// meanwhile does not run the slot a second time.
func TestADatabaseModeRunLongerThanItsClaimKeepsTheSlot(t *testing.T) {
	t.Parallel()
	_, pool := dbtest.New(t)
	started, release := make(chan struct{}), make(chan struct{})
	c1 := dbModeInstance(t, pool, "server-1", func(ctx context.Context, r *Run) error {
		close(started)
		<-release
		return nil
	})
	otherRan := false
	c2 := dbModeInstance(t, pool, "server-2", func(ctx context.Context, r *Run) error { otherRan = true; return nil })

	done := make(chan error, 1)
	go func() { done <- c1.SweepAt(context.Background(), sweep08) }()
	<-started
	claimedAt := benchtest.Value[time.Time](t, pool, `SELECT claimed_at FROM cron_slots WHERE job = 'report' AND slot = $1`, slot08)
	// Two claim TTLs after the claim: without extensions it would have run out.
	benchtest.Eventually(t, "two claim TTLs passed at the database", func() bool {
		return benchtest.Value[bool](t, pool, `SELECT now() > $1::timestamptz + 2 * make_interval(secs => $2)`, claimedAt, claimTestTTL.Seconds())
	})
	if err := c2.SweepAt(context.Background(), sweep08.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if otherRan {
		t.Error("another instance ran the slot while its claimer was still running it")
	}
	var state, instance string
	var attempts int
	if err := pool.QueryRow(context.Background(), `SELECT state, instance, attempts FROM cron_slots WHERE job = 'report' AND slot = $1`, slot08).
		Scan(&state, &instance, &attempts); err != nil {
		t.Fatal(err)
	}
	if state != "done" || instance != "server-1" || attempts != 1 {
		t.Errorf("slot: %s by %s after %d attempts, want done by server-1 after 1", state, instance, attempts)
	}
}

// A database-mode run whose claim another instance has taken (here: the row
// rewritten with a newer claim token) is stopped: its context ends with
// slots.ErrClaimLost and its Valid turns false, so its fenced writes are refused
// before they are tried.
func TestADatabaseModeRunWhoseClaimWasTakenIsStopped(t *testing.T) {
	t.Parallel()
	_, pool := dbtest.New(t)
	started := make(chan *Run, 1)
	var cause error
	var validAfter bool
	c := dbModeInstance(t, pool, "server-1", func(ctx context.Context, r *Run) error {
		started <- r
		<-ctx.Done()
		cause, validAfter = context.Cause(ctx), r.Valid()
		return ctx.Err()
	})
	done := make(chan error, 1)
	go func() { done <- c.SweepAt(context.Background(), sweep08) }()
	r := <-started
	if !r.Valid() {
		t.Fatal("the run is not valid while its claim holds")
	}
	benchtest.Exec(t, pool, `UPDATE cron_slots SET token = nextval('cron_claim_tokens'), instance = 'server-2', claimed_at = now()
		WHERE job = 'report' AND slot = $1`, slot08)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cause, slots.ErrClaimLost) || validAfter {
		t.Errorf("run ended with cause %v, valid %v; want %v and not valid", cause, validAfter, slots.ErrClaimLost)
	}
	if got := benchtest.Value[string](t, pool, `SELECT instance FROM cron_slots WHERE job = 'report' AND slot = $1`, slot08); got != "server-2" {
		t.Errorf("the slot's claim is %s's, want server-2's: the stopped run overwrote it", got)
	}
}

// In database mode a panic does not end anything but the run: the slot is
// recorded failed (and retried after the back-off), not left claimed until
// the claim runs out.
func TestADatabaseModePanicFailsTheSlot(t *testing.T) {
	t.Parallel()
	_, pool := dbtest.New(t)
	c := dbModeInstance(t, pool, "server-1", func(context.Context, *Run) error { panic("boom") })
	if err := c.SweepAt(context.Background(), sweep08); err != nil {
		t.Fatal(err)
	}
	var state, msg string
	if err := pool.QueryRow(context.Background(), `SELECT state, coalesce(error, '') FROM cron_slots WHERE job = 'report' AND slot = $1`, slot08).
		Scan(&state, &msg); err != nil {
		t.Fatal(err)
	}
	if state != "failed" || msg != "job panicked: boom" {
		t.Errorf("slot after a panic: %s (%q), want failed (\"job panicked: boom\")", state, msg)
	}
}
