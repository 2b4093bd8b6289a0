package service

import (
	"context"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/scheduler/controls"
)

// undrainTimeout bounds run --undrain's first attempt at start.
const undrainTimeout = 5 * time.Second

// undrain lifts this instance's drain (run --undrain) before its jobs start.
// If PostgreSQL does not answer, it keeps trying in the background until it
// does (the jobs wait for the controls' first read, which needs it too).
func (r *runner) undrain(ctx context.Context) {
	once := func(ctx context.Context) error {
		uctx, cancel := context.WithTimeout(ctx, undrainTimeout)
		defer cancel()
		d, was, err := controls.UndrainInstance(uctx, r.pool, r.cfg.Instance)
		switch {
		case err != nil:
			return err
		case was:
			r.ilog.Info("undrained at start (--undrain)", "drained_by", d.By, "drained_at", d.Since, "reason", d.Reason)
		default:
			r.ilog.Info("--undrain: this instance was not drained")
		}
		return nil
	}
	err := once(ctx)
	if err == nil || ctx.Err() != nil {
		return
	}
	r.ilog.Warn("--undrain: cannot lift this instance's drain yet; trying again until PostgreSQL answers", "err", err)
	go func() {
		for sleep.For(ctx, time.Second) {
			if once(ctx) == nil {
				return
			}
		}
	}()
}

// controlsReady is /readyz's controls check: once the scheduler runs, no
// job runs before the operators' controls (pauses, drains) were read once.
// (Before, the other checks say why: no lease yet.)
func (r *runner) controlsReady(context.Context) error {
	s := r.started.Load()
	if s == nil || !r.schedRunning.Load() {
		return nil
	}
	return s.ControlsRead()
}
