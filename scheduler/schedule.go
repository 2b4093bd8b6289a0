package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/scheduler/slots"
)

// runner runs a job's executions on this instance by its schedule: it builds
// each Run, calls the job (recovering a panic), records the run, and for a
// durable cron job sweeps its slots (package slots). It knows nothing of
// terms beyond the token and validity it is handed.
type runner struct {
	instance string
	log      *slog.Logger // the configured logger: NewRun adds job, instance and token
	pool     *pgxpool.Pool
	fence    *fencing.Fence
	rec      *recorder
	m        *metrics
	claimTTL time.Duration // database-mode claims (0: slots.DefaultClaimTTL)
	onTime   time.Duration // how late a cron slot may be and still run whatever the policy
}

// endsLead reports whether a run's error means the term is over for this job:
// a panic (resign and hand over), a refused fenced write or run record (a
// newer term has written, so this one is stale whatever etcd says), or a
// run refused because an operator holds the job back here (its pause or
// this instance's drain, found by the run's record before the controls'
// feed had read it).
func endsLead(err error) bool {
	return errors.As(err, new(*PanicError)) || errors.Is(err, fencing.ErrStaleToken) || errors.Is(err, ErrTermEnded) ||
		errors.As(err, new(*HeldError))
}

// schedule runs the job's schedule until ctx ends. token > 0 means a leader-mode
// singleton holding a term with that token, by h. It returns early only with
// an error that ends the lead (see endsLead).
func (rn *runner) schedule(ctx context.Context, j *job, mk func(slot time.Time) *Run, token int64, h hold) error {
	switch j.spec.Schedule.Kind {
	case configs.Continuous:
		return rn.continuous(ctx, j, mk)
	case configs.Interval:
		return rn.interval(ctx, j, mk, token > 0)
	case configs.Cron:
		if token > 0 {
			return rn.cron(j, slots.Leader(rn.fence, rn.instance, token, h.valid), func(context.Context, func() bool) hold { return h }).Loop(ctx)
		}
		return rn.localCron(ctx, j, mk)
	}
	return errors.New("no schedule")
}

// continuous runs the job until ctx ends, restarting it (with back-off after an
// error) if it returns.
func (rn *runner) continuous(ctx context.Context, j *job, mk func(time.Time) *Run) error {
	const maxBackoff = 30 * time.Second
	backoff := time.Second
	for ctx.Err() == nil {
		err := rn.call(ctx, j, mk(time.Time{}))
		switch {
		case ctx.Err() != nil:
			return nil
		case endsLead(err):
			return err
		case err != nil:
			j.log.Warn("continuous job returned an error; restarting", "err", err, "in", backoff)
			sleep.For(ctx, backoff)
			backoff = min(2*backoff, maxBackoff)
		default:
			sleep.For(ctx, time.Second)
			backoff = time.Second
		}
	}
	return nil
}

// pauseUnlessWoken waits d, or less if the job is a Waker that wakes.
func (rn *runner) pauseUnlessWoken(ctx context.Context, j *job, d time.Duration) {
	w, ok := j.impl.(Waker)
	if !ok || d <= 0 {
		sleep.For(ctx, d)
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	woke, start := w.Wake(wctx), time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-woke:
		j.log.Debug("woken before its interval", "interval_left", (d - time.Since(start)).Round(time.Second))
	}
}

// interval runs the job every Every (+ up to Jitter). A singleton counts from
// the last run of the job on any instance, as recorded in job_runs, so a
// failover does not make an hourly job run early; a job that runs everywhere
// counts from its own last run on this instance. Manual runs do not count:
// an operator's extra run neither pushes the next one back nor brings it
// forward.
func (rn *runner) interval(ctx context.Context, j *job, mk func(time.Time) *Run, shared bool) error {
	var lastLocal time.Time
	for ctx.Err() == nil {
		wait := rn.untilDue(ctx, j, shared, lastLocal)
		if sch := j.spec.Schedule; sch.Jitter > 0 && wait > 0 {
			wait += rand.N(sch.Jitter)
		}
		rn.pauseUnlessWoken(ctx, j, wait)
		if ctx.Err() != nil {
			return nil
		}
		lastLocal = time.Now()
		if err := rn.call(ctx, j, mk(time.Time{})); endsLead(err) {
			return err
		}
	}
	return nil
}

// untilDue is how long until the job's next interval run.
func (rn *runner) untilDue(ctx context.Context, j *job, shared bool, lastLocal time.Time) time.Duration {
	every := j.spec.Schedule.Every
	if shared && rn.pool != nil {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var secs *float64
		// The database's clock on both sides: no comparison across hosts.
		// A manual run (snip-jobs run JOB) is an extra one: it does not
		// move the schedule.
		err := rn.pool.QueryRow(qctx, `SELECT extract(epoch FROM max(started_at) + make_interval(secs => $2) - now())::float8
			FROM job_runs WHERE job = $1 AND trigger <> 'manual'`, j.spec.Name, every.Seconds()).Scan(&secs)
		if err == nil {
			if secs == nil {
				return 0
			}
			return max(0, time.Duration(*secs*float64(time.Second)))
		}
		j.log.Warn("cannot read the last run; counting from this instance's", "err", err)
	}
	if lastLocal.IsZero() {
		return 0
	}
	return max(0, time.Until(lastLocal.Add(every)))
}

// localCron fires a cron job that runs everywhere: no slots, no catch-up.
func (rn *runner) localCron(ctx context.Context, j *job, mk func(time.Time) *Run) error {
	for ctx.Err() == nil {
		next := j.spec.Schedule.Spec.Next(time.Now())
		if !slots.SleepUntil(ctx, next) {
			continue
		}
		if err := rn.call(ctx, j, mk(next)); endsLead(err) {
			return err
		}
	}
	return nil
}

// everywhere runs a job that is not a singleton, on this instance, until ctx
// ends (shutdown, or its pause: Scheduler.gated) or a run finds it held back
// (its error).
func (rn *runner) everywhere(ctx context.Context, j *job) error {
	mk := func(slot time.Time) *Run { return rn.newRun(j, 0, slot, "", hold{}, TriggerSchedule) }
	return rn.schedule(ctx, j, mk, 0, hold{})
}

// database runs a database-mode cron job: every instance sweeps, the unique
// slot row decides who runs each slot.
func (rn *runner) database(ctx context.Context, j *job) error {
	return rn.databaseCron(j).Loop(ctx)
}

func (rn *runner) databaseCron(j *job) *slots.Cron {
	return rn.cron(j, slots.Database(rn.pool, rn.instance, rn.claimTTL), claimHold)
}

// cron is the durable slots of cron job j taken with claims; each slot's run
// is an execution of the job like any other (recorded, panic recovered),
// holding its token by holdOf(the run's context and the claim's validity).
func (rn *runner) cron(j *job, claims slots.Claims, holdOf func(ctx context.Context, valid func() bool) hold) *slots.Cron {
	return &slots.Cron{
		Job:    slots.Job{Name: j.spec.Name, Schedule: j.spec.Schedule, Grace: j.spec.Grace, Log: j.log},
		Claims: claims, Pool: rn.pool, Fence: rn.fence, OnTime: rn.onTime, EndsLead: endsLead,
		Run: func(ctx context.Context, c slots.Claim, valid func() bool) error {
			trigger := TriggerSchedule
			if c.CatchUp {
				trigger = TriggerCatchUp
			}
			return rn.call(ctx, j, rn.newRun(j, c.Token, c.Slot, c.Resource, holdOf(ctx, valid), trigger))
		},
		Missed:   func(n int64) { rn.m.slotsMissed.WithLabelValues(j.spec.Name).Add(float64(n)) },
		CaughtUp: func() { rn.m.slotsCaughtUp.WithLabelValues(j.spec.Name).Inc() },
	}
}

// newRun builds the Run handed to the job. resource "" means the job's name;
// h is what the run holds its token by (hold{} for a job that runs
// everywhere); trigger is what started it (recorded with the run).
func (rn *runner) newRun(j *job, token int64, slot time.Time, resource string, h hold, trigger Trigger) *Run {
	var fence *fencing.Fence
	if token > 0 {
		fence = rn.fence
	}
	r := NewRun(RunConfig{
		Job: j.spec.Name, Instance: rn.instance, Token: token, Slot: slot, Trigger: trigger,
		Fence: fence, Resource: resource, Valid: h.valid, Log: rn.log, // NewRun adds job, instance, token
	})
	if h.valid != nil {
		r.hold = h
	}
	r.onPID = func(ctx context.Context, pid int) { rn.rec.runProcess(ctx, j, r, pid) }
	r.progress = &j.progress
	r.Progress()
	return r
}

// call runs the job once, recovering a panic, and records the run. Runs
// under one serial scope (withSerial: a term, or a stretch of a job without
// terms between two holds) take turns: a manual run waits for the
// schedule's run in progress, and the other way round. A run whose term is
// over as the records say does not begin (errRunRefused); one whose term
// ended before it returned is cut off (*CutOffError).
func (rn *runner) call(ctx context.Context, j *job, r *Run) (err error) {
	release, err := takeTurn(ctx)
	if err != nil {
		return err
	}
	defer release()
	rec, err := rn.rec.runStart(ctx, j, r)
	if err != nil {
		if errors.Is(err, ErrTermEnded) {
			rn.m.runs.WithLabelValues(j.spec.Name, "stale").Inc()
			r.Log.Warn("run not started: its term is over", "err", err)
		} else {
			r.Log.Info("run not started: held back by an operator", "why", err)
		}
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
			r.Log.Error("job panicked", "panic", p, "stack", string(err.(*PanicError).Stack))
		}
		err = cutOff(r, err)
		result := classify(ctx, err)
		rn.m.runs.WithLabelValues(j.spec.Name, result).Inc()
		rn.rec.runFinish(j, r, rec, result, err)
		switch result {
		case "ok", "cancelled":
			r.Log.Debug("run finished", "result", result)
		default:
			r.Log.Warn("run finished", "result", result, "err", err)
		}
	}()
	return j.impl.Run(ctx, r)
}

// cutOff makes err a *CutOffError when the run's hold ended before it
// returned, unless err already says more (a panic, a refused write).
func cutOff(r *Run, err error) error {
	if r.hold.holds() || errors.As(err, new(*PanicError)) || errors.Is(err, fencing.ErrStaleToken) || errors.Is(err, ErrTermEnded) {
		return err
	}
	return &CutOffError{Why: r.hold.reason(), Err: err}
}

func classify(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, new(*PanicError)):
		return "panic"
	case errors.As(err, new(*CutOffError)):
		return "cut off"
	case errors.Is(err, ErrTimedOut):
		return "timed out"
	case errors.Is(err, fencing.ErrStaleToken), errors.Is(err, ErrTermEnded):
		return "stale"
	case ctx.Err() != nil:
		return "cancelled"
	default:
		return "error"
	}
}
