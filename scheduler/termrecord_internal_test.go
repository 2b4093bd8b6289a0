package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/controls"
)

// leading is the tenure of st on j as the lifecycle makes it: its own
// context and its start record pending.
func (t *stubTerm) leading(j *job) *tenure {
	tn := t.tenure(j)
	tn.ctx, tn.stop = context.WithCancelCause(t.ctx)
	tn.rec = newTermRecord(tn)
	return tn
}

// firstRun is a run of tn's term, holding its start record.
func (t *stubTerm) firstRun(rn *runner, tn *tenure) *Run {
	return rn.newRun(tn.j, t.token, time.Time{}, "", termHold(t, tn.rec), TriggerSchedule)
}

// termRecords counts the records of the term with token.
func (rs *records) termRecords(token int64) int {
	rs.t.Helper()
	var n int
	if err := rs.pool.QueryRow(context.Background(), `SELECT count(*) FROM job_terms WHERE job = 'pulse' AND token = $1`, token).Scan(&n); err != nil {
		rs.t.Fatal(err)
	}
	return n
}

// started reads when the record of the term with token, and of run id,
// began (the database's now(): its transaction's start).
func (rs *records) started(token, id int64) (term, run time.Time) {
	rs.t.Helper()
	if err := rs.pool.QueryRow(context.Background(), `SELECT t.started_at, r.started_at FROM job_terms t, job_runs r
		WHERE t.job = 'pulse' AND t.token = $1 AND r.id = $2`, token, id).Scan(&term, &run); err != nil {
		rs.t.Fatalf("term %d and run %d: %v", token, id, err)
	}
	return term, run
}

// A term's first run writes the term's start record with its own, in one
// round trip and one transaction (both began at the same database instant),
// off the path from the win to the job's start; and a second run of the
// term writes only its own.
func TestATermsFirstRunRecordsTheTermWithItselfInOneTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j, rn, one := rs.s.jobs[0], rs.s.run, rs.of("server-1")

	st := newStubTerm(10, "lease-1")
	tn := st.leading(j)
	rec, err := one.runStart(ctx, j, st.firstRun(rn, tn))
	if err != nil || rec.ID == 0 {
		t.Fatalf("the first run's start: %+v, %v", rec, err)
	}
	if term, run := rs.started(10, rec.ID); !term.Equal(run) {
		t.Errorf("the term's record began at %v, its first run's at %v: two transactions, want one", term, run)
	}
	second, err := one.runStart(ctx, j, st.firstRun(rn, tn))
	if err != nil || second.ID == 0 {
		t.Fatalf("the second run's start: %+v, %v", second, err)
	}
	if term, run := rs.started(10, second.ID); !run.After(term) {
		t.Errorf("the second run's record began at %v, its term's at %v: want after", run, term)
	}
}

// A term whose first run finds a newer term recorded ends, and the run does
// not begin: its record and its term's are refused together.
func TestATermsFirstRunFindingANewerTermRecordedEndsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j, rn := rs.s.jobs[0], rs.s.run
	if err := rs.of("server-2").termStart(ctx, newStubTerm(20, "lease-2").tenure(j)); err != nil {
		t.Fatal(err)
	}
	st := newStubTerm(10, "lease-1")
	tn := st.leading(j)
	if _, err := rs.of("server-1").runStart(ctx, j, st.firstRun(rn, tn)); !errors.Is(err, errRunRefused) {
		t.Errorf("the first run of a superseded term: %v; want refused", err)
	}
	if cause := context.Cause(tn.ctx); !errors.Is(cause, errTermSuperseded) {
		t.Errorf("the superseded term's context: %v; want ended, superseded", cause)
	}
	if n := rs.termRecords(10); n != 0 {
		t.Errorf("records of the superseded term: %d; want none", n)
	}
}

// A term with no run soon (a cron job waiting for its slot) is recorded
// alone, and a later run of it after its term (one that comes while that
// write is in flight: TestARunWaitsForItsTermsRecordInFlight).
func TestATermWithoutARunIsRecordedAloneAndBeforeItsLaterRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j, rn, one := rs.s.jobs[0], rs.s.run, rs.of("server-1")

	st := newStubTerm(10, "lease-1")
	tn := st.leading(j)
	later := make(chan struct{})
	go func() { defer close(later); one.termStartLater(ctx, tn) }()
	<-tn.rec.done // claimed by the later write, as no run came
	rec, err := one.runStart(ctx, j, st.firstRun(rn, tn))
	<-later
	if err != nil || rec.ID == 0 {
		t.Fatalf("the run's start: %+v, %v", rec, err)
	}
	if term, run := rs.started(10, rec.ID); !run.After(term) {
		t.Errorf("the run's record began at %v, its term's at %v: want after", run, term)
	}
}

// A run of a term whose record another write has claimed, and has not yet
// sent (here: held waiting for a connection), waits for that write: its own
// record comes after its term's, never before.
func TestARunWaitsForItsTermsRecordInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j, rn, one := rs.s.jobs[0], rs.s.run, rs.of("server-1")
	cfg := rs.pool.Config().Copy()
	cfg.MaxConns = 1
	narrow, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(narrow.Close)
	held, err := narrow.Acquire(ctx) // the lone write waits for this connection
	if err != nil {
		t.Fatal(err)
	}
	lone := &recorder{pool: narrow, instance: "server-1", log: one.log}

	st := newStubTerm(10, "lease-1")
	tn := st.leading(j)
	if !tn.rec.claim() {
		t.Fatal("the record was claimed before the lone write")
	}
	written := make(chan struct{})
	go func() { // what claimAlone does once it has claimed
		defer close(written)
		endSuperseded(tn, lone.termStart(ctx, tn))
		tn.rec.settle()
	}()
	ran := make(chan int64, 1)
	go func() {
		rec, err := one.runStart(ctx, j, st.firstRun(rn, tn))
		if err != nil || rec.ID == 0 {
			t.Errorf("the run's start: %+v, %v", rec, err)
		}
		ran <- rec.ID
	}()
	var id int64
	select {
	case id = <-ran: // recorded without waiting: its record is in before its term's
	case <-time.After(200 * time.Millisecond): // waiting, as it should (the order below holds either way)
	}
	held.Release()
	<-written
	if id == 0 {
		id = <-ran
	}
	if term, run := rs.started(10, id); !run.After(term) {
		t.Errorf("the run's record began at %v, its term's at %v: want after", run, term)
	}
}

// A term that ends before any run and before its record's wait is recorded
// at its end, start before end.
func TestATermEndingBeforeItsRecordIsRecordedAtItsEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j, one := rs.s.jobs[0], rs.of("server-1")

	st := newStubTerm(10, "lease-1")
	tn := st.leading(j)
	one.ensureTermStart(ctx, tn)
	one.termEnd(ctx, tn, errResignRequested)
	reason, by, ended, _ := rs.term(10)
	if ended == nil || by != "server-1" || reason == "" {
		t.Errorf("the term's record: reason %q, ended by %q at %v; want its end recorded by server-1", reason, by, ended)
	}
}

// A term whose first run's context ended as its record went out (the term
// ended, or the service shut down, during that round trip) is recorded
// still: nothing writes it later (CI's systemd test stopped the service
// right after a term's win and found no record of it). The run does not
// wait for it (its term's end must not wait on a record), and the run the
// batch recorded is recorded cancelled.
func TestATermEndedDuringItsFirstRecordIsRecordedStill(t *testing.T) {
	t.Parallel()
	rs := newRecords(t)
	j, rn, one := rs.s.jobs[0], rs.s.run, rs.of("server-1")

	st := newStubTerm(10, "lease-1")
	tn := st.leading(j)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if rec, err := one.runStart(gone, j, st.firstRun(rn, tn)); err != nil || rec.ID != 0 {
		t.Fatalf("the run's start: %+v, %v; want it gone on unrecorded (best-effort)", rec, err)
	}
	one.writes.Wait()
	if n := rs.termRecords(10); n != 1 {
		t.Errorf("records of the term: %d; want 1", n)
	}
	var result, msg string
	if err := rs.pool.QueryRow(context.Background(), `SELECT coalesce(result, ''), coalesce(error, '') FROM job_runs
		WHERE job = 'pulse' AND token = 10`).Scan(&result, &msg); err != nil || result != "cancelled" {
		t.Errorf("the run the batch recorded: %q (%q), %v; want it cancelled", result, msg, err)
	}
}

// A term whose record could not be written with its first run (here: the
// database refused the run's record, and the term's with it, in one
// transaction) is not recorded at its end instead: job_terms dates a term
// by its record, and that one would say it began as it ended.
func TestATermsRecordThatFailedIsNotWrittenLateAtItsEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j, rn, one := rs.s.jobs[0], rs.s.run, rs.of("server-1")

	st := newStubTerm(10, "lease-1")
	tn := st.leading(j)
	bad := rn.newRun(j, st.token, time.Time{}, "", termHold(st, tn.rec), Trigger("no such trigger"))
	if _, err := one.runStart(ctx, j, bad); err != nil {
		t.Fatalf("a run whose record failed goes on (best-effort): %v", err)
	}
	one.ensureTermStart(ctx, tn)
	if n := rs.termRecords(10); n != 0 {
		t.Errorf("records of the term after its end: %d; want none", n)
	}
}

// A term won after a pause's commit, by an instance whose controls had not
// read it yet, ends before the job writes anything: its first run's record
// finds the pause, and a manual request waiting for the job is not claimed
// (a claim is a fenced write before any run's record, so it waits for the
// term's own read of the controls).
func TestATermWonAfterAPauseClaimsNothingBeforeItEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j := rs.s.jobs[0]
	spec := j.spec
	spec.Singleton = true
	m, _, err := controls.RequestRun(ctx, rs.pool, spec, "alice@web1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := controls.PauseJob(ctx, rs.pool, spec.Name, "bob@web2", "maintenance"); err != nil {
		t.Fatal(err)
	}
	lc := *rs.s.leader
	stale := &fixedControls{st: controls.State{Open: map[string]controls.Request{spec.Name: {
		ID: m.ID, Job: spec.Name, Mode: configs.ModeLeader.String(), State: controls.StatePending}}}}
	lc.gate = &gate{ctl: stale, instance: "server-1", pool: rs.pool}

	cause := lc.lead(ctx, j, newStubTerm(10, "lease-1"))
	if !errors.Is(cause, ErrPaused) {
		t.Errorf("the lead ended with %v; want the pause", cause)
	}
	r, err := controls.ReadRun(ctx, rs.pool, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != controls.StatePending || r.Token != 0 {
		t.Errorf("the manual request after the paused job's term: %+v; want still pending, unclaimed", r)
	}
}

// everySecond is a cron schedule whose slots are each second's start.
type everySecond struct{}

func (everySecond) Next(t time.Time) time.Time { return t.Truncate(time.Second).Add(time.Second) }

// A cron leader's term won after a pause's commit claims no slot before its
// read of the controls ends it: a new leader's sweep claims the slot that
// fell due within the last second at once (it runs whatever the policy), and
// that claim is a fenced write, so it waits for the read.
func TestACronTermWonAfterAPauseClaimsNoSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := newRecords(t)
	j := rs.s.jobs[0]
	j.spec.Singleton = true
	j.spec.Schedule = configs.Schedule{Kind: configs.Cron, Spec: everySecond{}, Location: time.UTC, Coordination: configs.Leader}
	if _, _, err := controls.PauseJob(ctx, rs.pool, j.spec.Name, "bob@web2", "maintenance"); err != nil {
		t.Fatal(err)
	}
	lc := *rs.s.leader
	lc.gate = &gate{ctl: &fixedControls{}, instance: "server-1", pool: rs.pool} // its feed has not read the pause

	if cause := lc.lead(ctx, j, newStubTerm(10, "lease-1")); !errors.Is(cause, ErrPaused) {
		t.Errorf("the lead ended with %v; want the pause", cause)
	}
	var slots int
	if err := rs.pool.QueryRow(ctx, `SELECT count(*) FROM cron_slots WHERE job = $1`, j.spec.Name).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 0 {
		t.Errorf("slots claimed by the paused job's term: %d; want none", slots)
	}
}

// A resign request that names a term and arrives between its win and its
// bookkeeping (the job not yet knowing the term, so the request's watch
// cannot stop it) ends the term as it begins, with the request as the
// cause, before the job runs.
func TestAResignRequestBeforeATermsBeginningEndsItAsItBegins(t *testing.T) {
	t.Parallel()
	rs := newRecords(t)
	j := rs.s.jobs[0]
	ran := make(chan struct{})
	j.impl = JobFunc(func(ctx context.Context, _ *Run) error {
		close(ran)
		<-ctx.Done()
		return nil
	})
	resignRequested(rs.s.jobs, j.spec.Name, 10) // no term here yet: only noted
	lc := *rs.s.leader
	lc.gate = &gate{ctl: &fixedControls{}, instance: "server-1", pool: rs.pool}

	ended := make(chan error, 1)
	go func() { ended <- lc.lead(context.Background(), j, newStubTerm(10, "lease-1")) }()
	select {
	case <-ran:
		t.Fatal("the job ran in a term an operator had asked to resign")
	case cause := <-ended:
		if !errors.Is(cause, errResignRequested) {
			t.Errorf("the lead ended with %v; want the resign request", cause)
		}
	}
	if reason, by, _, _ := rs.term(10); reason != endLabel(errResignRequested, nil) || by != "server-1" {
		t.Errorf("the term's record: ended %q by %q; want the resign request, by server-1", reason, by)
	}
}
