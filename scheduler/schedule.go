package scheduler

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/sleep"
)

// endsLead reports whether a run's error means the term is over for this job:
// a panic (resign and hand over) or a refused fenced write (a newer term has
// written, so this one is stale whatever etcd says).
func endsLead(err error) bool {
	return errors.As(err, new(*PanicError)) || errors.Is(err, fencing.ErrStaleToken) || errors.Is(err, ErrTermEnded)
}

// schedule runs the job's schedule until ctx ends. token > 0 means a leader-mode
// singleton holding a term with that token. It returns early only with an
// error that ends the lead (see endsLead).
func (s *Scheduler) schedule(ctx context.Context, j *job, mk func(slot time.Time) *Run, token int64, valid func() bool) error {
	switch j.spec.Schedule.Kind {
	case configs.Continuous:
		return s.continuous(ctx, j, mk)
	case configs.Interval:
		return s.interval(ctx, j, mk, token > 0)
	case configs.Cron:
		if token > 0 {
			return s.durableCron(ctx, j, leaderClaims{s: s, token: token, term: valid})
		}
		return s.localCron(ctx, j, mk)
	}
	return errors.New("no schedule")
}

// continuous runs the job until ctx ends, restarting it (with back-off after an
// error) if it returns.
func (s *Scheduler) continuous(ctx context.Context, j *job, mk func(time.Time) *Run) error {
	const maxBackoff = 30 * time.Second
	backoff := time.Second
	for ctx.Err() == nil {
		err := s.call(ctx, j, mk(time.Time{}))
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
func (s *Scheduler) pauseUnlessWoken(ctx context.Context, j *job, d time.Duration) {
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
// counts from its own last run on this instance.
func (s *Scheduler) interval(ctx context.Context, j *job, mk func(time.Time) *Run, shared bool) error {
	var lastLocal time.Time
	for ctx.Err() == nil {
		wait := s.untilDue(ctx, j, shared, lastLocal)
		if sch := j.spec.Schedule; sch.Jitter > 0 && wait > 0 {
			wait += rand.N(sch.Jitter)
		}
		s.pauseUnlessWoken(ctx, j, wait)
		if ctx.Err() != nil {
			return nil
		}
		lastLocal = time.Now()
		if err := s.call(ctx, j, mk(time.Time{})); endsLead(err) {
			return err
		}
	}
	return nil
}

// untilDue is how long until the job's next interval run.
func (s *Scheduler) untilDue(ctx context.Context, j *job, shared bool, lastLocal time.Time) time.Duration {
	every := j.spec.Schedule.Every
	if shared && s.cfg.Pool != nil {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var secs *float64
		// The database's clock on both sides: no comparison across hosts.
		err := s.cfg.Pool.QueryRow(qctx, `SELECT extract(epoch FROM max(started_at) + make_interval(secs => $2) - now())::float8
			FROM job_runs WHERE job = $1`, j.spec.Name, every.Seconds()).Scan(&secs)
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
func (s *Scheduler) localCron(ctx context.Context, j *job, mk func(time.Time) *Run) error {
	for ctx.Err() == nil {
		next := j.spec.Schedule.Spec.Next(time.Now())
		if !sleepUntil(ctx, next) {
			continue
		}
		if err := s.call(ctx, j, mk(next)); endsLead(err) {
			return err
		}
	}
	return nil
}

// sleepUntil waits until the wall-clock instant t, re-checking every minute so
// that a clock step is noticed. It reports whether t was reached (not ctx's end
// or a re-check).
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d > time.Minute {
		sleep.For(ctx, time.Minute)
		return false
	}
	sleep.For(ctx, d)
	return ctx.Err() == nil && !time.Now().Before(t)
}
