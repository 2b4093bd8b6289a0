package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/scheduler/slots"
)

// ErrNotFenced is returned by Run.Fenced for a run without a fencing token: a
// job that is not a singleton runs on every instance and has nothing to fence by.
var ErrNotFenced = errors.New("scheduler: this run has no fencing token (the job is not a singleton)")

// ErrTermEnded is returned by Run.Fenced when the run's term has already ended:
// the write is not attempted.
var ErrTermEnded = errors.New("scheduler: the run's term has ended")

// ErrNoSlot is returned by Run.CompleteSlot for a run that is not a cron slot.
var ErrNoSlot = errors.New("scheduler: this run is not a cron slot")

// ErrTimedOut is wrapped by a run's error when the run was stopped because it
// took longer than its job allows (an exec job's timeout): job_runs records
// it as "timed out".
var ErrTimedOut = errors.New("timed out")

// Trigger is what started a run, as job_runs records it (its trigger column,
// migration 0013).
type Trigger string

const (
	// TriggerSchedule is the job's schedule: an interval or continuous run,
	// a cron run of a job that runs everywhere, or a cron slot run on time
	// (due within the on-time window when its sweep began).
	TriggerSchedule Trigger = "schedule"
	// TriggerCatchUp is a cron slot run late by the catch-up sweep: it fell
	// due before the on-time window (a missed slot the policy catches up, or
	// a failed or abandoned one taken again later); the runs
	// snip_jobs_cron_slots_caught_up_total counts.
	TriggerCatchUp Trigger = "catch-up"
	// TriggerManual is an operator's request to run the job now.
	TriggerManual Trigger = "manual"
)

// Run is one execution of a job, handed to Job.Run. Its methods are safe for
// concurrent use.
type Run struct {
	// Job is the job's name from the config.
	Job string
	// Instance is this server's instance name.
	Instance string
	// Token is the fencing token: the term's (leader mode) or the slot claim's
	// (database mode). 0 for jobs that are not singletons.
	Token int64
	// Slot is the scheduled instant a cron run is for; zero for other schedules.
	Slot time.Time
	// Trigger is what started the run, recorded with it in job_runs: set by
	// whoever starts it (NewRun: RunConfig.Trigger, schedule by default).
	Trigger Trigger
	// ManualRun is the id of the operator's request (manual_runs, `snip-jobs
	// run JOB`) the run executes; 0 for a run of the schedule.
	ManualRun int64
	// Log carries job, instance and token.
	Log *slog.Logger

	runID    int64                              // the run's row in job_runs, once recorded (0: not recorded)
	recorded recordedStart                      // its start as recorded
	onPID    func(ctx context.Context, pid int) // records a process the run started (nil: nothing to record)
	resource string
	fence    *fencing.Fence
	hold     hold
	progress *atomic.Int64 // unix nanos of the last Progress call; shared with the scheduler's watchdog
}

// hold is what a run holds its token by: a term (leader mode), a slot's or a
// manual run's claim (database mode), or nothing (a job that runs
// everywhere: always valid).
type hold struct {
	valid func() bool
	// why says why the hold ended; called only once valid is false.
	why func() string
	// deadline is when it stops being valid unless renewed first (zero:
	// never); nil: none.
	deadline func() time.Time
	// term: the token is a term's, so a newer term's record or run
	// supersedes this one's runs (a claim's token is a sequence number).
	term bool
	// rec is the term's start record, which its first run writes (nil: not
	// a term's run, or a test's).
	rec *termRecord
}

// holds reports whether the hold still holds (always, for no hold).
func (h hold) holds() bool { return h.valid == nil || h.valid() }

// reason says why the hold ended.
func (h hold) reason() string {
	if h.why == nil {
		return "its term ended"
	}
	return h.why()
}

// termHold is the hold of a term's runs; rec is its start record.
func termHold(t Term, rec *termRecord) hold {
	return hold{valid: t.Valid, term: true, rec: rec, deadline: t.Deadline, why: func() string {
		if r := t.Reason(); r != "" {
			return string(r)
		}
		return "its deadline passed"
	}}
}

// claimHold is the hold of a database-mode claim's runs; ctx is the run's
// (slots.Hold's).
func claimHold(ctx context.Context, valid func() bool) hold {
	return hold{valid: valid, deadline: func() time.Time { return slots.Deadline(ctx) }, why: func() string { return "its claim lapsed" }}
}

// CutOffError is a run's error when its term (or claim) ended before the run
// returned: whatever the run did after that was not under its term, and the
// fence refuses its writes once a successor has written. job_runs records it
// as "cut off", never "ok".
type CutOffError struct {
	Why string // why the term ended
	Err error  // what the run itself returned; nil if it returned nil
}

func (e *CutOffError) Error() string {
	if e.Err == nil {
		return "its term ended while it ran: " + e.Why
	}
	return "its term ended while it ran: " + e.Why + ": " + e.Err.Error()
}

func (e *CutOffError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrTermEnded) true: a run cut off ends the lead.
func (e *CutOffError) Is(target error) bool { return target == ErrTermEnded }

// RunConfig builds a Run outside the scheduler: for tests of job types, which
// need real tokens and a real database but not the whole scheduler.
type RunConfig struct {
	Job, Instance string
	Token         int64
	Slot          time.Time
	// Trigger is what started the run; "" is TriggerSchedule.
	Trigger Trigger
	// ManualRun is the manual run request the run executes (0: none).
	ManualRun int64
	Fence     *fencing.Fence // nil: Fenced returns ErrNotFenced
	// Resource is what Fenced fences by; default the job's name.
	Resource string
	// Valid reports whether the term still holds; nil means always.
	Valid func() bool
	Log   *slog.Logger
}

// NewRun builds a Run.
func NewRun(c RunConfig) *Run {
	if c.Resource == "" {
		c.Resource = c.Job
	}
	if c.Valid == nil {
		c.Valid = func() bool { return true }
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Trigger == "" {
		c.Trigger = TriggerSchedule
	}
	r := &Run{
		Job: c.Job, Instance: c.Instance, Token: c.Token, Slot: c.Slot, Trigger: c.Trigger, ManualRun: c.ManualRun,
		Log:      c.Log.With("job", c.Job, "instance", c.Instance, "token", c.Token),
		resource: c.Resource, fence: c.Fence, hold: hold{valid: c.Valid},
		progress: new(atomic.Int64),
	}
	if !c.Slot.IsZero() {
		r.Log = r.Log.With("slot", c.Slot)
	}
	if c.Trigger != TriggerSchedule {
		r.Log = r.Log.With("trigger", string(c.Trigger))
	}
	if c.ManualRun != 0 {
		r.Log = r.Log.With("manual_run", c.ManualRun)
	}
	r.Progress()
	return r
}

// Valid reports, without I/O, whether the run's term still holds (always true
// for jobs that are not singletons). A false answer is final.
func (r *Run) Valid() bool { return r.hold.holds() }

// ID is the run's row in job_runs (snip-jobs history's), 0 when its start
// could not be recorded.
func (r *Run) ID() int64 { return r.runID }

// Resource is the fencing resource Fenced writes through: the job's name,
// or "<job>@<slot>" in database mode.
func (r *Run) Resource() string { return r.resource }

// RecordProcess records that the run started process pid (an exec job's
// program): status and the status page show it while the run goes on.
// Best-effort, bounded by ctx.
func (r *Run) RecordProcess(ctx context.Context, pid int) {
	if r.onPID != nil {
		r.onPID(ctx, pid)
	}
}

// Deadline is the instant the run's term (or database-mode claim) stops
// being valid unless renewed first, on this process's monotonic clock: it
// moves later with each renewal. The zero Time when the run has no such
// bound (a job that runs everywhere, a completed claim) or once the term has
// ended. Whatever the run does outside this process must stop by then: an
// exec job's supervisor kills its program's tree at it.
func (r *Run) Deadline() time.Time {
	if r.hold.deadline == nil {
		return time.Time{}
	}
	return r.hold.deadline()
}

// Progress tells the watchdog the job is alive. Call it whenever the job has
// done a unit of work; a singleton with progress_timeout that stays silent
// longer resigns its term so another instance takes over.
func (r *Run) Progress() { r.progress.Store(time.Now().UnixNano()) }

// Fenced runs fn in one transaction fenced by the run's token on the job's
// resource (its name; "<name>@<slot>" in database mode): a newer term's write to
// it makes this one fail with *fencing.StaleTokenError before fn runs. Every
// write a singleton makes to PostgreSQL goes through here (or FencedConn).
func (r *Run) Fenced(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return r.FencedOn(ctx, r.resource, fn)
}

// FencedOn is Fenced on another resource name (e.g. one per customer domain).
func (r *Run) FencedOn(ctx context.Context, resource string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if r.fence == nil || r.Token <= 0 {
		return ErrNotFenced
	}
	if !r.hold.holds() {
		return ErrTermEnded
	}
	return r.fence.Do(ctx, resource, r.Token, fn)
}

// FencedConn is FencedOn run on conn, a connection the job opened for itself
// and closes when done, instead of one of the shared pool's: for a job whose
// statements may change their session (the sql type runs an operator's
// statement), so that whatever they leave dies with the connection instead
// of reaching the next user of the pool. resource "" is the run's own (as
// Fenced).
func (r *Run) FencedConn(ctx context.Context, conn *pgx.Conn, resource string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if r.fence == nil || r.Token <= 0 {
		return ErrNotFenced
	}
	if !r.hold.holds() {
		return ErrTermEnded
	}
	if resource == "" {
		resource = r.resource
	}
	return r.fence.DoOn(ctx, conn, resource, r.Token, fn)
}

// Complete marks what the run is for done inside the caller's transaction
// (a fenced one, with the run's token): its cron slot (CompleteSlot), or the
// operator's manual run request it executes, so that the job's output and
// the completion commit together, once. It does nothing for a run that is
// for neither (an interval or continuous run of the schedule), nor for a
// manual run of a job that runs everywhere (each instance runs it once).
func (r *Run) Complete(ctx context.Context, tx pgx.Tx) error {
	switch {
	case !r.Slot.IsZero():
		return r.CompleteSlot(ctx, tx)
	case r.ManualRun != 0 && r.Token > 0:
		return controls.Complete(ctx, tx, r.ManualRun, r.Token, r.runID)
	}
	return nil
}

// CompleteSlot marks the run's cron slot done inside the caller's transaction,
// so that the job's output and the slot's completion commit together: a slot
// completed this way is never run again, whatever fails afterwards. A job that
// does not call it gets its slot marked done after it returns nil, which
// leaves a window (crash after the job's commit) in which the slot runs twice:
// such jobs must be idempotent per slot.
func (r *Run) CompleteSlot(ctx context.Context, tx pgx.Tx) error {
	if r.Slot.IsZero() {
		return ErrNoSlot
	}
	return slots.Complete(ctx, tx, r.Job, r.Slot, r.Token)
}
