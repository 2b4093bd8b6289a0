package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// stubTerm is a term whose end the test decides.
type stubTerm struct {
	token  int64
	lease  string
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newStubTerm(token int64, lease string) *stubTerm {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &stubTerm{token: token, lease: lease, ctx: ctx, cancel: cancel}
}

func (t *stubTerm) Job() string                  { return "pulse" }
func (t *stubTerm) Token() int64                 { return t.token }
func (t *stubTerm) Lease() string                { return t.lease }
func (t *stubTerm) Started() time.Time           { return time.Time{} }
func (t *stubTerm) Context() context.Context     { return t.ctx }
func (t *stubTerm) Valid() bool                  { return t.ctx.Err() == nil }
func (t *stubTerm) Deadline() time.Time          { return time.Now().Add(time.Hour) }
func (t *stubTerm) Reason() leadership.Reason    { return leadership.ReasonOf(context.Cause(t.ctx)) }
func (t *stubTerm) Resign(context.Context) error { t.end(leadership.ReasonResigned); return nil }
func (t *stubTerm) end(r leadership.Reason)      { t.cancel(leadership.Ended(r, "")) }
func (t *stubTerm) tenure(j *job) *tenure {
	return &tenure{j: j, term: t, log: slog.New(slog.DiscardHandler)}
}
func (t *stubTerm) run(rn *runner, j *job) *Run {
	return rn.newRun(j, t.token, time.Time{}, "", termHold(t, nil), TriggerSchedule)
}

// records is one database's view of the records of job "pulse", written by
// the recorders of instances named as the test needs.
type records struct {
	t    *testing.T
	pool *pgxpool.Pool
	s    *Scheduler // server-1's: its job and runner
}

func newRecords(t *testing.T) *records {
	t.Helper()
	db := dbtest.NewDB(t)
	pool := dbtest.Pool(t, db.Runtime)
	reg, _ := NewRegistry(Type{Name: "rec", New: func(Env, configs.Job) (Job, error) {
		return JobFunc(func(context.Context, *Run) error { return nil }), nil
	}})
	// Not a singleton, so that New needs no session: the recorders are
	// handed the terms.
	spec := configs.Job{Name: "pulse", Type: "rec", Grace: time.Second,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Hour}}
	s, err := New(Config{File: &configs.File{Instance: "server-1", Jobs: []configs.Job{spec}}, Registry: reg, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return &records{t: t, pool: pool, s: s}
}

// of is the recorder of instance name.
func (rs *records) of(name string) *recorder {
	return &recorder{pool: rs.pool, instance: name, log: slog.New(slog.DiscardHandler)}
}

// term reads the record of the term with token.
func (rs *records) term(token int64) (reason, endedBy string, ended, noticed *time.Time) {
	rs.t.Helper()
	if err := rs.pool.QueryRow(context.Background(), `SELECT coalesce(reason, ''), coalesce(ended_by, ''), ended_at, noticed_at
		FROM job_terms WHERE job = 'pulse' AND token = $1`, token).Scan(&reason, &endedBy, &ended, &noticed); err != nil {
		rs.t.Fatalf("term %d: %v", token, err)
	}
	return
}

// now is the database's clock now.
func (rs *records) now() time.Time {
	rs.t.Helper()
	var at time.Time
	if err := rs.pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&at); err != nil {
		rs.t.Fatal(err)
	}
	return at
}

// run reads the record of run id.
func (rs *records) run(id int64) (result, msg string, finished *time.Time) {
	rs.t.Helper()
	if err := rs.pool.QueryRow(context.Background(), `SELECT coalesce(result, ''), coalesce(error, ''), finished_at
		FROM job_runs WHERE id = $1`, id).Scan(&result, &msg, &finished); err != nil {
		rs.t.Fatalf("run %d: %v", id, err)
	}
	return
}

// A leader froze mid-run and was replaced; when it wakes, what it writes
// must not make the history lie. Its successor closed its term (expired,
// recorded by the successor, when it learned it) and its run (cut off); the
// woken instance's next run is refused; its own late notice of the term's
// end does not replace the successor's account but is kept as when it
// noticed; and its frozen run, which returned "ok" by its own view, is
// recorded cut off: a newer term had begun before it returned.
func TestAFrozenLeadersRecordsCannotContradictItsSuccessors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j, rn := rs.s.jobs[0], rs.s.run
	one, two := rs.of("server-1"), rs.of("server-2")

	t10 := newStubTerm(10, "lease-1")
	if err := one.termStart(ctx, t10.tenure(j)); err != nil {
		t.Fatal(err)
	}
	frozen := t10.run(rn, j)
	rec, err := one.runStart(ctx, j, frozen)
	if err != nil || rec.ID == 0 {
		t.Fatalf("the leader's run start: %+v, %v", rec, err)
	}

	// server-1 froze; its lease expired; server-2 won.
	t20 := newStubTerm(20, "lease-2")
	if err := two.termStart(ctx, t20.tenure(j)); err != nil {
		t.Fatal(err)
	}
	reason, by, ended, _ := rs.term(10)
	if reason != status.EndExpired || by != "server-2" || ended == nil {
		t.Errorf("the frozen term after its successor's start: reason %q, ended by %q at %v; want expired, by server-2, closed", reason, by, ended)
	}
	if result, msg, fin := rs.run(rec.ID); result != "cut off" || fin == nil || !strings.Contains(msg, "server-2") {
		t.Errorf("the frozen run after the successor's start: %q (%q) at %v; want cut off, naming server-2", result, msg, fin)
	}
	cutAt := *ended

	// server-1 wakes: its session sees the key gone.
	t10.end(leadership.ReasonKeyLost)
	if _, err := one.runStart(ctx, j, t10.run(rn, j)); !errors.Is(err, errRunRefused) {
		t.Errorf("a run of the ended term after the successor's start: %v; want refused", err)
	}
	one.termEnd(ctx, t10.tenure(j), leadership.Ended(leadership.ReasonKeyLost, ""))
	reason, by, ended, noticed := rs.term(10)
	if reason != status.EndExpired || by != "server-2" || !ended.Equal(cutAt) || noticed == nil || !noticed.After(cutAt) {
		t.Errorf("after server-1's late notice: reason %q by %q, ended %v, noticed %v; want server-2's account kept (expired at %v) and a later notice",
			reason, by, ended, noticed, cutAt)
	}
	// Its frozen run returns "ok" by its own view.
	if err := one.runEnd(rec.ID, "ok", nil, rs.now(), "pulse", 10, true); err != nil {
		t.Fatal(err)
	}
	if result, _, fin := rs.run(rec.ID); result != "cut off" || !fin.Equal(cutAt) {
		t.Errorf("the frozen run's own end: %q at %v; want cut off, at the successor's close (%v)", result, fin, cutAt)
	}

	// A term won just before the freeze, recorded after the successor's:
	// refused, and nothing of it is recorded.
	if err := one.termStart(ctx, newStubTerm(15, "lease-1").tenure(j)); !errors.Is(err, errTermSuperseded) {
		t.Errorf("the start of term 15 after term 20's: %v; want superseded", err)
	}
	var n int
	if err := rs.pool.QueryRow(ctx, `SELECT count(*) FROM job_terms WHERE token = 15`).Scan(&n); err != nil || n != 0 {
		t.Errorf("term 15 recorded %d times (%v); want none", n, err)
	}
}

// A hand-over races its successor: the successor's start may be recorded
// before the resigning instance's own records (the lifecycle waits a moment
// for its runs' ends before it resigns, not for ever; the term's end is
// written after the resignation, off the hand-over's path). The instance's
// own records are the exact account and replace the successor's guess: the
// term ended by a hand-over, and its run, which returned before the
// hand-over, ended ok, when it returned.
func TestAHandOverRecordedAfterTheSuccessorsStartIsTheAccountThatStands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j, rn := rs.s.jobs[0], rs.s.run
	one, two := rs.of("server-1"), rs.of("server-2")

	t10 := newStubTerm(10, "lease-1")
	if err := one.termStart(ctx, t10.tenure(j)); err != nil {
		t.Fatal(err)
	}
	rec, err := one.runStart(ctx, j, t10.run(rn, j))
	if err != nil {
		t.Fatal(err)
	}
	returned := rs.now()
	t10.end(leadership.ReasonResigned)
	if err := two.termStart(ctx, newStubTerm(20, "lease-2").tenure(j)); err != nil {
		t.Fatal(err)
	}
	if reason, by, _, _ := rs.term(10); reason != status.EndExpired || by != "server-2" {
		t.Errorf("before the resigning instance's records: reason %q, by %q; want the successor's expired", reason, by)
	}
	if result, _, _ := rs.run(rec.ID); result != "cut off" {
		t.Errorf("the run before its instance's record: %q; want the successor's cut off", result)
	}
	if err := one.runEnd(rec.ID, "ok", nil, returned, "pulse", 10, true); err != nil {
		t.Fatal(err)
	}
	one.termEnd(ctx, t10.tenure(j), errRebalance)
	if reason, by, _, _ := rs.term(10); reason != status.EndRebalance || by != "server-1" {
		t.Errorf("the handed-over term: reason %q, ended by %q; want rebalance, by server-1", reason, by)
	}
	if result, _, fin := rs.run(rec.ID); result != "ok" || !fin.Equal(returned) {
		t.Errorf("the run that returned before the hand-over: %q at %v; want ok, at %v", result, fin, returned)
	}
}

// A dead process's terms are named by its reclaim, which knows why they
// ended better than the successor that closed them; their open runs close.
func TestAReclaimNamesTheTermsOfTheLeaseItEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j, rn := rs.s.jobs[0], rs.s.run
	one := rs.of("server-1")
	t10 := newStubTerm(10, "lease-1")
	if err := one.termStart(ctx, t10.tenure(j)); err != nil {
		t.Fatal(err)
	}
	rec, err := one.runStart(ctx, j, t10.run(rn, j))
	if err != nil {
		t.Fatal(err)
	}
	// server-1 was SIGKILLed; its host's supervisor revoked its lease, and
	// server-2 took the job over at once.
	if err := rs.of("server-2").termStart(ctx, newStubTerm(20, "lease-2").tenure(j)); err != nil {
		t.Fatal(err)
	}
	if n, err := RecordReclaimed(ctx, rs.pool, "lease-1"); err != nil || n != 1 {
		t.Fatalf("RecordReclaimed: %d terms, %v; want 1", n, err)
	}
	if reason, by, ended, _ := rs.term(10); reason != status.EndReclaimed || by != "reclaim" || ended == nil {
		t.Errorf("the dead process's term: reason %q, by %q, ended %v; want reclaimed, by reclaim", reason, by, ended)
	}
	if result, _, fin := rs.run(rec.ID); result != "cut off" || fin == nil {
		t.Errorf("its run: %q at %v; want cut off", result, fin)
	}
}

// A reclaim and the successors it lets in at once record concurrently, on
// the same terms and runs: neither may fail (they take each job's records
// lock in one order; PostgreSQL once ended one of the two as a deadlock).
func TestAReclaimAndItsSuccessorsRecordingAtOnceNeverDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j, rn := rs.s.jobs[0], rs.s.run
	for round := range 20 {
		lease := fmt.Sprintf("lease-%d", round)
		var jobs []*job
		for k := range 4 {
			jk := &job{spec: j.spec, log: j.log, changed: j.changed}
			jk.spec.Name = fmt.Sprintf("pulse-%d", k)
			jobs = append(jobs, jk)
			tk := newStubTerm(int64(1000*round+10*k+1), lease)
			if err := rs.of("server-1").termStart(ctx, tk.tenure(jk)); err != nil {
				t.Fatal(err)
			}
			if _, err := rs.of("server-1").runStart(ctx, jk, tk.run(rn, jk)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(jobs)+1)
		wg.Go(func() {
			_, err := RecordReclaimed(ctx, rs.pool, lease)
			errs <- err
		})
		for k, jk := range jobs {
			wg.Go(func() {
				bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				var newer, terms, runs int64
				errs <- rs.pool.QueryRow(bctx, sqlTermStart, jk.spec.Name, int64(1000*round+10*k+5), "server-2", "lease-b").Scan(&newer, &terms, &runs)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
