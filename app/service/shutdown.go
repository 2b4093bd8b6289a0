package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// shutdown stops the jobs (stopJobs), waits for the scheduler to resign every
// term (schedDone), closes the session (revoking the lease), the admin server
// and the connections, within shutdown_timeout. stopJobs and schedDone are nil
// when the scheduler never ran. It returns an error if a step did not finish.
func (r *runner) shutdown(stopJobs func(), schedDone <-chan struct{}) error {
	r.notify.stopping()
	if r.stopSchemaCheck != nil {
		r.stopSchemaCheck()
	}
	if r.admin != nil {
		r.admin.Stopping()
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ShutdownTimeout)
	defer cancel()
	// Steps after the deadline still get a moment: revoking the lease is what
	// lets a successor start without waiting for it to expire.
	stepCtx := func() (context.Context, context.CancelFunc) {
		if ctx.Err() != nil {
			return context.WithTimeout(context.Background(), closeGrace)
		}
		return context.WithCancel(ctx)
	}
	var errs []error
	if stopJobs != nil {
		stopJobs()
		select {
		case <-schedDone:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("jobs still running after shutdown_timeout %v", r.cfg.ShutdownTimeout))
			r.ilog.Error("jobs did not stop within shutdown_timeout; closing the session anyway (their fenced writes will be refused)",
				"shutdown_timeout", r.cfg.ShutdownTimeout)
		}
	}
	if r.session != nil {
		sctx, scancel := stepCtx()
		if err := r.session.Close(sctx); err != nil {
			errs = append(errs, err)
			r.ilog.Error("leadership session did not close in time; successors wait for the lease to expire", "err", err)
		}
		scancel()
	}
	if r.listens != nil {
		actx, acancel := stepCtx()
		r.listens.shutdown(actx)
		acancel()
	}
	if r.admin != nil {
		actx, acancel := stepCtx()
		if err := r.admin.Shutdown(actx); err != nil {
			r.ilog.Warn("admin server shutdown", "err", err)
		}
		acancel()
	}
	if r.etcd != nil {
		_ = r.etcd.Close()
	}
	if r.embedded != nil {
		r.embedded.Close()
	}
	for _, p := range []*pgxpool.Pool{r.pool, r.records} {
		if p == nil {
			continue
		}
		// Close waits for every connection to be released; a job that ignores
		// its context may hold one forever.
		closed := make(chan struct{})
		go func() { p.Close(); close(closed) }()
		pctx, pcancel := stepCtx()
		select {
		case <-closed:
		case <-pctx.Done():
			r.ilog.Warn("database pool still has connections in use; exiting without waiting for them",
				"pool", p.Config().ConnConfig.RuntimeParams["application_name"])
		}
		pcancel()
	}
	return errors.Join(errs...)
}

// healthy is what the systemd watchdog pings depend on. Missing a lease is
// healthy while the backend's server (etcd, the API server) does not answer
// (restarting would not help); it is not when it answers and the session has
// still held no lease for a few TTLs.
func (r *runner) healthy() error {
	if !r.schedRunning.Load() {
		return errors.New("the scheduler is not running")
	}
	if r.session == nil {
		return nil
	}
	if err := r.session.Err(); err != nil {
		return fmt.Errorf("the %s session stopped: %w", r.cfg.Leadership.Backend, err)
	}
	now := time.Now()
	if holdsLease(r.session.Stats()) {
		r.lastLease.Store(now.UnixNano())
		return nil
	}
	without := now.Sub(time.Unix(0, r.lastLease.Load()))
	if without < stuckLeaseFactor*r.cfg.Leadership.TTL {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.reach(ctx); err != nil {
		return nil // the server is down: waiting is all anyone can do
	}
	return fmt.Errorf("%s answers, but the session has held no lease for %v", r.cfg.Leadership.Backend, without.Round(time.Second))
}

// statusLine is the STATUS= line shown by systemctl status.
func (r *runner) statusLine() string {
	s := fmt.Sprintf("%d job(s)", len(r.cfg.Jobs))
	if r.sched != nil && r.session != nil {
		s += fmt.Sprintf(", leading %d", r.sched.Leading())
		if !holdsLease(r.session.Stats()) {
			s += ", no " + r.leaseWord()
		}
	}
	return s
}
