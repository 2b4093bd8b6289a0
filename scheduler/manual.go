package scheduler

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/scheduler/slots"
)

// Manual runs (`snip-jobs run JOB`, package controls): one extra execution of
// a job, exactly once across the cluster. Each instance looks at the open
// request of each of its jobs whenever its controls are read (at each
// notification, and every renew interval besides):
//
//   - leader mode: the leader claims it with its term's token, in a
//     transaction fenced on the job's resource, when it is pending or claimed
//     under an older term (whose leader is gone or will be refused), runs it
//     under the term, and records its outcome fenced; a run its term's end
//     cut short is left claimed, for the next leader to run;
//   - database mode: the instance whose update claims it (a token from
//     cron_claim_tokens) runs it, fenced on its own resource, holding the
//     claim while the run goes on; a claim that ran out is taken over;
//   - everywhere: each instance runs it once (manual_run_reports).
//
// A manual run takes turns with the schedule's runs of the same term (or
// stretch of a job without terms), so a job never runs twice at once on an
// instance. Continuous jobs have none (the command refuses them).

// manualResults say what a manual run's result makes of its request: done,
// failed, or "" (left claimed: its term or claim ended under it, and another
// claimer runs it again).
func manualState(result string) string {
	switch result {
	case "ok":
		return controls.StateDone
	case "error", "panic", "timed out":
		return controls.StateFailed
	}
	return ""
}

// manual runs the leader's manual run requests of the tenure's job while the
// tenure lasts. A run whose error ends the lead (a panic, a refused write)
// ends it.
func (lc *lifecycle) manual(t *tenure) {
	j, token := t.j, t.term.Token()
	if lc.gate == nil || lc.gate.ctl == nil || j.spec.Schedule.Kind == configs.Continuous {
		return
	}
	for {
		ch := lc.gate.changed()
		req, ok := lc.gate.state().Open[j.spec.Name]
		if ok && req.Mode == configs.ModeLeader.String() &&
			(req.State == controls.StatePending || req.State == controls.StateRunning && req.Token < token) {
			if err := lc.run.manualAsLeader(t, req); endsLead(err) {
				t.stop(err)
				return
			}
		}
		select {
		case <-t.ctx.Done():
			return
		case <-ch:
		}
	}
}

// manualAsLeader claims request req for the tenure's term and runs it.
func (rn *runner) manualAsLeader(t *tenure, req controls.Request) error {
	j, token := t.j, t.term.Token()
	ok, err := controls.ClaimLeader(t.ctx, rn.fence, j.spec.Name, req.ID, rn.instance, token)
	switch {
	case errors.Is(err, fencing.ErrStaleToken):
		return err
	case err != nil:
		t.log.Warn("cannot claim the manual run; trying again at the next read of the controls", "manual_run", req.ID, "err", err)
		return nil
	case !ok:
		return nil
	}
	t.log.Info("running a manual run", "manual_run", req.ID, "requested_by", req.RequestedBy, "taken_over", req.State == controls.StateRunning)
	r := rn.newRun(j, token, time.Time{}, "", termHold(t.term, t.rec), TriggerManual)
	r.ManualRun = req.ID
	r.Log = r.Log.With("manual_run", req.ID)
	err = rn.call(t.ctx, j, r)
	rn.finishManual(t.ctx, j, r, j.spec.Name, err)
	return err
}

// finishManual records a singleton's manual run's outcome (fenced on
// resource by its token), unless its term or claim ended under it: then it
// is left claimed, and run again by the next claimer.
func (rn *runner) finishManual(ctx context.Context, j *job, r *Run, resource string, runErr error) {
	result := classify(ctx, runErr)
	state := manualState(result)
	if state == "" {
		r.Log.Info("manual run cut short; left for the next claimer", "result", result, "err", runErr)
		return
	}
	msg := ""
	if runErr != nil {
		msg = runErr.Error()
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := controls.Finish(fctx, rn.fence, resource, r.ManualRun, r.Token, r.runID, state, result, msg); err != nil {
		r.Log.Warn("cannot record the manual run's outcome; the next claimer runs it again", "state", state, "err", err)
	}
}

// manualDatabase runs the manual run requests of database-mode job j that
// this instance claims, until ctx ends (shutdown, pause, drain).
func (rn *runner) manualDatabase(ctx context.Context, j *job, g *gate) {
	if g == nil || g.ctl == nil {
		return
	}
	for {
		ch := g.changed()
		req, ok := g.state().Open[j.spec.Name]
		if ok && req.Mode == configs.ModeDatabase.String() &&
			(req.State == controls.StatePending || req.State == controls.StateRunning && req.ClaimExpired) {
			rn.manualClaimed(ctx, j, req)
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// manualClaimed claims database-mode request req and, if this instance won
// it, runs it, holding the claim meanwhile.
func (rn *runner) manualClaimed(ctx context.Context, j *job, req controls.Request) {
	ttl := rn.claimTTL
	if ttl <= 0 {
		ttl = slots.DefaultClaimTTL
	}
	claimed := time.Now()
	token, ok, err := controls.ClaimDatabase(ctx, rn.pool, req.ID, rn.instance, ttl)
	if err != nil {
		j.log.Warn("cannot claim the manual run; trying again at the next read of the controls", "manual_run", req.ID, "err", err)
	}
	if !ok {
		return
	}
	resource := controls.ManualResource(j.spec.Name, req.ID)
	hctx, valid, unhold := controls.Hold(ctx, rn.pool, req.ID, token, claimed, ttl, j.log)
	r := rn.newRun(j, token, time.Time{}, resource, claimHold(hctx, valid), TriggerManual)
	r.ManualRun = req.ID
	r.Log = r.Log.With("manual_run", req.ID)
	r.Log.Info("running a manual run", "requested_by", req.RequestedBy, "taken_over", req.State == controls.StateRunning)
	err = rn.call(hctx, j, r)
	unhold()
	switch {
	case errors.Is(context.Cause(hctx), controls.ErrClaimLost):
		// Another instance has it (or may take it): not ours to record.
	case err != nil && ctx.Err() != nil:
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		defer cancel()
		if rerr := controls.Release(rctx, rn.pool, req.ID, token); rerr != nil {
			r.Log.Warn("cannot release the manual run's claim; another instance takes it once it runs out", "err", rerr)
		}
	default:
		rn.finishManual(ctx, j, r, resource, err)
	}
}

// manualEverywhere runs, once on this instance, each manual run request of
// job j (which runs everywhere), until ctx ends.
func (rn *runner) manualEverywhere(ctx context.Context, j *job, g *gate) {
	if g == nil || g.ctl == nil || j.spec.Schedule.Kind == configs.Continuous {
		return
	}
	for {
		ch := g.changed()
		req, ok := g.state().Open[j.spec.Name]
		if ok && req.Mode == configs.ModeEverywhere.String() && !slices.Contains(req.Reported, rn.instance) {
			rn.manualHere(ctx, j, req)
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}

// manualHere runs request req of a job that runs everywhere on this
// instance, unless it has already, and reports how it went.
func (rn *runner) manualHere(ctx context.Context, j *job, req controls.Request) {
	ok, err := controls.StartReport(ctx, rn.pool, req.ID, rn.instance)
	if err != nil {
		j.log.Warn("cannot start the manual run; trying again at the next read of the controls", "manual_run", req.ID, "err", err)
	}
	if !ok {
		return
	}
	r := rn.newRun(j, 0, time.Time{}, "", hold{}, TriggerManual)
	r.ManualRun = req.ID
	r.Log = r.Log.With("manual_run", req.ID)
	r.Log.Info("running a manual run", "requested_by", req.RequestedBy)
	runErr := rn.call(ctx, j, r)
	msg := ""
	if runErr != nil {
		msg = runErr.Error()
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := controls.FinishReport(fctx, rn.pool, req.ID, rn.instance, r.runID, classify(ctx, runErr), msg); err != nil {
		r.Log.Warn("cannot record the manual run's outcome", "err", err)
	}
}
