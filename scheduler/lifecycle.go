package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/scheduler/status"
)

// Ending a lead for a reason of the scheduler's own (context causes).
var (
	errShutdown         = errors.New("shutdown")
	errWatchdog         = errors.New("watchdog: no progress within progress_timeout")
	errResignRequested  = errors.New("resign requested by an operator")
	errRebalance        = errors.New("handing over to spread singletons over instances")
	errScheduleReturned = errors.New("schedule returned")
)

// lifecycle is the leader lifecycle of the leader-mode singletons: campaign,
// lead (the job's schedule under the term's context, with a watchdog), stop
// the job within its grace, resign, record, campaign again.
type lifecycle struct {
	session  Session
	instance string
	spread   *spread
	run      *runner
	rec      *recorder
	m        *metrics
	gate     *gate // the operators' controls: no campaign while paused or drained
	// left is closed once this instance has deregistered at shutdown; terms
	// are resigned after it, so that their successors see it gone.
	left chan struct{}
}

// loop campaigns for the job and leads each term won, until ctx ends. While
// the job is paused, or this instance drained, it holds no campaign: it
// waits (a campaign in progress when that happens is given up).
func (lc *lifecycle) loop(ctx context.Context, j *job) {
	hold := leadership.WithHoldback(func() time.Duration { return lc.spread.holdback(j) })
	for ctx.Err() == nil {
		if !lc.gate.wait(ctx, j) || !programsGone(ctx, j) {
			return
		}
		cctx, stopCampaign := lc.gate.whileAllowed(ctx, j)
		term, err := lc.session.Campaign(cctx, j.spec.Name, hold)
		stopCampaign()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if cctx.Err() != nil {
				continue // held back meanwhile: wait until it may run again
			}
			j.log.Error("campaign failed; retrying", "err", err)
			sleep.For(ctx, time.Second)
			continue
		}
		cause := lc.lead(ctx, j, term)
		if handedOver(cause) {
			// Let another instance win this one first.
			j.mu.Lock()
			j.holdUntil = time.Now().Add(2 * lc.spread.delay())
			j.mu.Unlock()
		}
	}
}

// programsGone waits until the processes of j's earlier runs on this instance
// are gone (Settler), false if ctx ends first.
func programsGone(ctx context.Context, j *job) bool {
	s, ok := j.impl.(Settler)
	if !ok {
		return true
	}
	ch := s.Settled()
	select {
	case <-ch:
		return true
	default:
	}
	j.log.Warn("not campaigning: a program of an earlier run is not proven gone yet")
	select {
	case <-ch:
		j.log.Info("the earlier run's programs are gone; campaigning")
		return true
	case <-ctx.Done():
		return false
	}
}

// tenure is one term of one job on this instance, from its win to its
// resignation.
type tenure struct {
	j    *job
	term Term
	log  *slog.Logger
	ctx  context.Context // the job's: ends with the term, at shutdown, or by stop
	stop context.CancelCauseFunc
	rec  *termRecord // its start's record
}

// lead runs the job's schedule for the duration of one term, then stops it and
// resigns. It returns why the lead ended.
func (lc *lifecycle) lead(ctx context.Context, j *job, term Term) error {
	t := &tenure{j: j, term: term, log: j.log.With("token", term.Token())}
	t.rec = newTermRecord(t)
	t.ctx, t.stop = context.WithCancelCause(withSerial(term.Context()))
	defer t.stop(nil)
	unlink := context.AfterFunc(ctx, func() { t.stop(errShutdown) })
	defer unlink()
	// A pause of the job or a drain of this instance ends the lead: the
	// job's context ends with the *HeldError as its cause. One that came
	// before the win (committed before it, read after it) ends it before the
	// job writes anything: a run's record reads the pause and the drain
	// again as it begins, so a schedule whose first write is its run's
	// starts beside this read (off the path from the win to the run); one
	// that claims first (a cron slot, a manual request) waits for it.
	heldRead := make(chan struct{})
	go func() {
		defer close(heldRead)
		var held *HeldError
		if errors.As(lc.gate.heldNow(t.ctx, j), &held) {
			t.stop(held)
		}
	}()
	lc.begin(ctx, t)
	unheld := lc.gate.stopWhenHeld(t.ctx, j, t.stop)
	defer unheld()

	h := termHold(term, t.rec)
	mk := func(slot time.Time) *Run {
		return lc.run.newRun(j, term.Token(), slot, "", h, TriggerSchedule)
	}
	done := make(chan error, 1)
	go func() {
		manual := make(chan struct{})
		go func() { defer close(manual); <-heldRead; lc.manual(t) }()
		if k := j.spec.Schedule.Kind; k != configs.Continuous && k != configs.Interval {
			<-heldRead
		}
		err := lc.run.schedule(t.ctx, j, mk, term.Token(), h)
		t.stop(scheduleReturned(err))
		<-manual
		done <- err
	}()
	ended, returned := lc.watch(t, done)
	cause := context.Cause(t.ctx)
	// How the hand-over's time is spent, for the "term over" line.
	ending := time.Now()
	if !returned {
		ended = lc.awaitGrace(t, done, cause)
	}
	if ended != nil && errors.As(ended, new(*PanicError)) {
		cause = ended
	}
	lc.rec.flush(j)
	stopped := time.Since(ending)
	lc.resign(ctx, t, cause)
	resigned := time.Since(ending)
	// The end is recorded after the hand-over, off its path: under load that
	// write took up to ~90 ms. Its successor may record its start first;
	// History puts a handed-over term's end no later than that start.
	lc.rec.ensureTermStart(ctx, t)
	lc.rec.termEnd(ctx, t, cause)
	recorded := time.Since(ending)
	lc.end(t, cause)
	t.log.Info("term over", "why", endLabel(cause, term), "cause", cause, "held_for", time.Since(term.Started()).Round(time.Millisecond),
		"job_stopped_after", stopped, "resigned_after", resigned, "recorded_after", recorded)
	return cause
}

// begin makes the term the job's current one: status, metrics, the log line;
// its start is recorded with its first run's (termRecord).
func (lc *lifecycle) begin(ctx context.Context, t *tenure) {
	j, name := t.j, t.j.spec.Name
	j.progress.Store(time.Now().UnixNano())
	lc.spread.leading.Add(1)
	var asked bool
	j.update(func() {
		j.term, j.stop = t.term, t.stop
		asked = j.resignToken == t.term.Token()
		j.resignedHere = j.resignedHere || asked
	})
	lc.m.leader.WithLabelValues(name).Set(1)
	lc.m.token.WithLabelValues(name).Set(float64(t.term.Token()))
	lc.m.termStarts.WithLabelValues(name).Inc()
	t.log.Info("leading")
	if asked { // the request came between the win and this (its watch is not this goroutine)
		t.log.Info("resign requested by an operator", "token", t.term.Token())
		t.stop(errResignRequested)
	}
	go lc.rec.termStartLater(ctx, t)
}

// watch waits until the schedule returns (returned: its error is ended) or
// the job's context ends; meanwhile the watchdog ends the lead of a job
// silent for longer than its progress_timeout.
func (lc *lifecycle) watch(t *tenure, done <-chan error) (ended error, returned bool) {
	var watchdog <-chan time.Time
	if pt := t.j.spec.ProgressTimeout; pt > 0 {
		tick := time.NewTicker(max(pt/4, 10*time.Millisecond))
		defer tick.Stop()
		watchdog = tick.C
	}
	for {
		select {
		case err := <-done:
			t.stop(scheduleReturned(err))
			return err, true
		case <-t.ctx.Done():
			return nil, false
		case <-watchdog:
			if silent := time.Since(time.Unix(0, t.j.progress.Load())); silent > t.j.spec.ProgressTimeout {
				lc.m.watchdog.WithLabelValues(t.j.spec.Name).Inc()
				t.log.Warn("no progress reported; resigning", "silent_for", silent.Round(time.Millisecond), "progress_timeout", t.j.spec.ProgressTimeout)
				t.stop(errWatchdog)
			}
		}
	}
}

// scheduleReturned is why a lead ends when the job's schedule returned with
// err: err itself, or errScheduleReturned.
func scheduleReturned(err error) error {
	if err == nil {
		return errScheduleReturned
	}
	return err
}

// awaitGrace waits up to the job's grace for its schedule to return after
// the lead ended; past it, the run is counted and logged as an overrun.
func (lc *lifecycle) awaitGrace(t *tenure, done <-chan error, cause error) error {
	grace := time.NewTimer(t.j.spec.Grace)
	defer grace.Stop()
	select {
	case ended := <-done:
		return ended
	case <-grace.C:
		lc.m.overruns.WithLabelValues(t.j.spec.Name).Inc()
		t.log.Error(MsgOverrun, "grace", t.j.spec.Grace, "cause", cause)
		return nil
	}
}

// resign hands over at once. Resign is guarded by the token: if a successor
// already holds the key, it is left alone. At shutdown, deregister first.
func (lc *lifecycle) resign(ctx context.Context, t *tenure, cause error) {
	if errors.Is(cause, errShutdown) {
		<-lc.left
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := t.term.Resign(rctx); err != nil {
		t.log.Warn("resign failed; the successor waits for the lease", "err", err)
	}
}

// end makes the term no longer the job's current one.
func (lc *lifecycle) end(t *tenure, cause error) {
	j, name := t.j, t.j.spec.Name
	lc.spread.leading.Add(-1)
	j.update(func() { j.term, j.stop = nil, nil })
	lc.m.leader.WithLabelValues(name).Set(0)
	lc.m.token.WithLabelValues(name).Set(0)
	lc.m.termEnds.WithLabelValues(name, endLabel(cause, t.term)).Inc()
}

// MsgOverrun is the message of the log line (level ERROR, with job, instance,
// token, grace and cause) for a run still going after the grace period that
// followed the end of its term.
const MsgOverrun = "job still running after its grace period; its fenced writes will be refused"

// resignRequested ends the lead of job name if its current token is the one
// an operator asked to resign (leadership.RequestResign). Every instance
// notes when (the spread rule leaves a resigned job where it went, for the
// resign hold); the leader also that it was it.
func resignRequested(jobs []*job, name string, token int64) {
	for _, j := range jobs {
		if j.spec.Name != name {
			continue
		}
		j.mu.Lock()
		stop, term := j.stop, j.term
		here := stop != nil && term != nil && term.Token() == token
		j.resigned, j.resignedHere, j.resignToken = time.Now(), here, token
		j.mu.Unlock()
		if here {
			j.log.Info("resign requested by an operator", "token", token)
			stop(errResignRequested)
		}
	}
}

// resignHeld reports whether job j is within the hold of an operator's
// resign (hold long), and whether this instance was the one resigned.
func (j *job) resignHeld(hold time.Duration) (held, here bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	held = !j.resigned.IsZero() && time.Since(j.resigned) < hold
	return held, held && j.resignedHere
}

// handedOver reports whether a lead ended by this instance's choice while the
// term was still good: watchdog, panic, operator request (resign, pause,
// drain) or spread.
func handedOver(cause error) bool {
	return errors.Is(cause, errWatchdog) || errors.Is(cause, errResignRequested) ||
		errors.Is(cause, errRebalance) || errors.As(cause, new(*PanicError)) ||
		errors.Is(cause, ErrPaused) || errors.Is(cause, ErrDrained)
}

// endLabel names why a lead ended, for metrics and logs.
func endLabel(cause error, term Term) string {
	switch {
	case errors.Is(cause, errShutdown):
		return status.EndShutdown
	case errors.Is(cause, errWatchdog):
		return status.EndWatchdog
	case errors.Is(cause, errResignRequested):
		return status.EndResignRequest
	case errors.Is(cause, errRebalance):
		return status.EndRebalance
	case errors.Is(cause, ErrPaused):
		return status.EndPaused
	case errors.Is(cause, ErrDrained):
		return status.EndDrained
	case errors.As(cause, new(*PanicError)):
		return status.EndPanic
	case errors.Is(cause, fencing.ErrStaleToken), errors.Is(cause, ErrTermEnded):
		return status.EndFenced
	case errors.Is(cause, errTermSuperseded):
		return status.EndSuperseded
	}
	if r := leadership.ReasonOf(cause); r != "" {
		return string(r)
	}
	if r := term.Reason(); r != "" {
		return string(r)
	}
	return "ended"
}
