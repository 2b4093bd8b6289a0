package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/notify"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/scheduler/status"
)

// Config wires a Scheduler.
type Config struct {
	File     *configs.File
	Registry *Registry
	// Session is this process's leadership session (Over(*leadership.Session)).
	// Required when a singleton runs in leader mode (the default); nil is fine
	// when every singleton uses database mode.
	Session Session
	// Pool is the PostgreSQL pool for fenced writes, cron slots and the run log.
	// Required when any job is a singleton or a cron job.
	Pool *pgxpool.Pool
	// Records is the pool for the scheduler's own records (job_terms,
	// job_runs, fence_rejections); nil: Pool. A small pool of its own, with
	// WarmRecords as its AfterConnect hook, keeps them off the jobs'
	// connections, which a cancelled job's statement closes: a term's start
	// and end are then written in one round trip on a warm connection, not
	// after a new connection is made and its first statement parsed.
	Records *pgxpool.Pool
	Log     *slog.Logger
	Metrics prometheus.Registerer // nil: not exported
	Mux     *http.ServeMux        // handed to job types; nil gets a private one
	// ClaimTTL is how long a database-mode claim lasts unless extended
	// (0: slots.DefaultClaimTTL).
	ClaimTTL time.Duration
	// Controls are the operators' controls (pauses, drains, manual runs).
	// nil: with a Pool, the scheduler reads them itself (a controls.Feed on
	// a connection of its own, re-read every renew interval); without one,
	// there are none. Until they have been read once, no job runs.
	Controls Controls
	// ResignHold is how long a job an operator resigned (snip-jobs resign)
	// stays off the instance that resigned it, and where the spread rule
	// leaves it (0: DefaultResignHold).
	ResignHold time.Duration
	// Secrets are the paths holding the service's secrets, which no
	// process a job starts may read (Env.Secrets; configs.File.SecretPaths).
	Secrets []string
}

// DefaultResignHold is how long, by default, a job an operator resigned
// stays off the instance that resigned it: long enough for an operator to
// look at that instance, short of a drain (which lasts until undrain). The
// instance takes the job back within the hold only if no other instance
// does (a singleton is never left leaderless for it).
const DefaultResignHold = 5 * time.Minute

// PanicError is what a job's panic becomes; it ends the term by resignation.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("job panicked: %v", e.Value) }

// mode is where a job runs (configs.Job.Mode derives it).
type mode = configs.Mode

const (
	everywhere   = configs.ModeEverywhere // not a singleton
	leaderMode   = configs.ModeLeader     // singleton gated by an etcd term
	databaseMode = configs.ModeDatabase   // singleton cron job decided by the unique slot row
)

// Scheduler runs the configured jobs. Create it with New, then call Run.
//
// It wires the concerns apart: the runner runs a job's executions by its
// schedule (durable cron slots: package slots), the lifecycle leads the
// leader-mode singletons' terms, spread keeps their share fair, the recorder
// writes the scheduler's own records, and Status reads the jobs' state.
type Scheduler struct {
	cfg      Config
	instance string
	log      *slog.Logger
	m        *metrics
	jobs     []*job

	spread *spread
	rec    *recorder
	run    *runner
	leader *lifecycle
	gate   *gate
	feed   *controls.Feed // the controls read by the scheduler itself; nil when given or none

	changed notify.Notifier
	// pruneDenied: the runtime role was refused a prune (logged once).
	pruneDenied atomic.Bool
}

// Changed returns a channel closed at the next change of what Status or
// Leading report (a term begun or ended, a run started or finished): take
// it, read the state, then wait on it, and no change is missed.
func (s *Scheduler) Changed() <-chan struct{} { return s.changed.Wait() }

// update changes the job's live state under its lock and wakes the waiters
// on Scheduler.Changed.
func (j *job) update(f func()) {
	j.mu.Lock()
	f()
	j.mu.Unlock()
	j.changed.Notify()
}

// job is one configured job and its live state.
type job struct {
	spec configs.Job
	impl Job
	mode mode
	log  *slog.Logger

	progress atomic.Int64 // unix nanos, shared by the job's Runs

	changed *notify.Notifier // the Scheduler's: told of every update

	mu        sync.Mutex
	term      Term
	stop      context.CancelCauseFunc // ends the current lead
	holdUntil time.Time
	last      *status.RunRecord
	// resigned is when an operator last asked this job's leader, on any
	// instance, to resign; resignedHere whether this instance was it.
	resigned     time.Time
	resignedHere bool
	// resignToken is the token the latest resign request named: a term
	// that begins here after its request arrived resigns as it begins.
	resignToken int64

	recording sync.WaitGroup // the writes of its runs' ends in flight
}

// New checks the configuration against the registry and builds every job. An
// error names the job and its place in the config file.
func New(cfg Config) (*Scheduler, error) {
	switch {
	case cfg.File == nil:
		return nil, errors.New("scheduler: Config.File is required")
	case cfg.Registry == nil:
		return nil, errors.New("scheduler: Config.Registry is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Mux == nil {
		cfg.Mux = http.NewServeMux()
	}
	s := &Scheduler{cfg: cfg, instance: cfg.File.Instance, log: cfg.Log.With("instance", cfg.File.Instance)}
	s.m = newMetrics(cfg.Metrics, cfg.Session, s.controlsSeries)
	s.spread = newSpread(cfg.Session, s.instance, s.m.holdbacks)
	if cfg.ResignHold > 0 {
		s.spread.resignHold = cfg.ResignHold
	}
	s.rec = &recorder{pool: cfg.Records, instance: s.instance, log: s.log}
	if s.rec.pool == nil {
		s.rec.pool = cfg.Pool
	}
	s.run = &runner{instance: s.instance, log: cfg.Log, pool: cfg.Pool, rec: s.rec, m: s.m,
		claimTTL: cfg.ClaimTTL, onTime: time.Minute}
	if cfg.Session != nil {
		// A slot due within a minute (or 3×TTL: a failover at the slot
		// instant) runs whatever the catch-up policy.
		s.run.onTime = max(s.run.onTime, 3*cfg.Session.Config().TTL)
	}
	if err := s.openControls(); err != nil {
		return nil, err
	}
	s.spread.gate = s.gate
	s.leader = &lifecycle{session: cfg.Session, instance: s.instance, spread: s.spread, run: s.run, rec: s.rec, m: s.m,
		gate: s.gate, left: make(chan struct{})}
	if cfg.Pool != nil {
		s.run.fence = s.newFence()
	}
	env := Env{Instance: s.instance, Pool: cfg.Pool, Log: s.log, Metrics: cfg.Metrics, Mux: cfg.Mux,
		Secrets: cfg.Secrets}
	var errs []error
	for _, spec := range cfg.File.Jobs {
		j, err := s.newJob(env, spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: job %q: %w", spec.Pos, spec.Name, err))
			continue
		}
		s.jobs = append(s.jobs, j)
		if j.mode == leaderMode {
			s.spread.singletons++
			// Exported from the start, so that "nobody leads it" (every
			// instance's 0) is a series before any term, and the first term
			// start counts as an increase.
			s.m.leader.WithLabelValues(spec.Name).Set(0)
			s.m.termStarts.WithLabelValues(spec.Name)
		}
	}
	return s, errors.Join(errs...)
}

// newFence is the fence of the singletons' writes, its stale holders and
// refusals counted and logged (and refusals recorded).
func (s *Scheduler) newFence() *fencing.Fence {
	// A fenced write that has waited a second for a resource's row held by
	// an older term's transaction (a leader cut off with a slow or dead
	// database link) ends that transaction. A fenced transaction idle
	// (between statements) for three lease TTLs belongs to a leader that
	// has gone quiet or is cut off: PostgreSQL ends it whoever waits, so
	// that nothing waits for TCP to notice. Three TTLs leave room for a
	// slow link's round trips.
	idle := 30 * time.Second
	if s.cfg.Session != nil {
		idle = max(5*time.Second, 3*s.cfg.Session.Config().TTL)
	}
	return fencing.New(s.cfg.Pool, s.instance, fencing.WithIdleTimeout(idle),
		fencing.WithStaleHolderBreak(time.Second, func(h fencing.StaleHolder) {
			s.m.staleHolders.WithLabelValues(h.Resource).Inc()
			s.log.Warn("ended an older term's transaction holding the resource", "resource", h.Resource,
				"token", h.Token, "holder_token", h.HolderToken, "holder_pid", h.HolderPID)
		}),
		fencing.WithRejectHook(func(resource string, token, current int64) {
			s.m.rejections.WithLabelValues(resource).Inc()
			s.log.Warn("fenced write refused: a newer term has written", "resource", resource, "token", token, "current", current)
			s.rec.bookkeep(context.Background(), sqlRejection,
				resource, token, current, s.instance)
		}))
}

func (s *Scheduler) newJob(env Env, spec configs.Job) (*job, error) {
	t, ok := s.cfg.Registry.Type(spec.Type)
	if !ok {
		return nil, fmt.Errorf("unknown job type %q", spec.Type)
	}
	j := &job{spec: spec, mode: spec.Mode(), log: s.log.With("job", spec.Name), changed: &s.changed}
	switch {
	case j.mode == leaderMode && s.cfg.Session == nil:
		return nil, errors.New("a singleton in leader mode needs etcd (no leadership session)")
	case (j.mode != everywhere || spec.Schedule.Kind == configs.Cron) && s.cfg.Pool == nil:
		return nil, errors.New("needs PostgreSQL (fenced writes and durable slots), but no database is configured")
	}
	env.Log = j.log
	impl, err := t.Build(env, spec)
	if err != nil {
		return nil, err
	}
	j.impl = impl
	j.progress.Store(time.Now().UnixNano())
	return j, nil
}

// Run runs every job until ctx ends, then cancels them, waits for each up to
// its grace period, deregisters, resigns every term, and returns. Close the
// leadership session afterwards to revoke the lease.
func (s *Scheduler) Run(ctx context.Context) error {
	stopLeave := context.AfterFunc(ctx, func() {
		defer close(s.leader.left)
		if s.cfg.Session == nil {
			return
		}
		dctx, cancel := context.WithTimeout(context.Background(), s.cfg.Session.Config().RenewInterval)
		defer cancel()
		if err := s.cfg.Session.Deregister(dctx); err != nil {
			s.log.Warn("cannot deregister before handing over; successors may hold back a moment", "err", err)
		}
	})
	defer stopLeave()
	var wg sync.WaitGroup
	if s.feed != nil {
		wg.Go(func() { _ = s.feed.Run(ctx) })
	}
	for _, j := range s.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if j.mode == leaderMode {
				s.leader.loop(ctx, j) // bounds each term's run by the grace itself
				return
			}
			stopped := make(chan struct{})
			defer close(stopped)
			stopWatch := context.AfterFunc(ctx, func() { s.watchGrace(j, stopped) })
			defer stopWatch()
			s.gated(ctx, j)
		}()
	}
	if s.spread.singletons > 0 {
		wg.Add(2)
		go func() { defer wg.Done(); s.spread.loop(ctx, s.jobs) }()
		go func() {
			defer wg.Done()
			s.cfg.Session.WatchResignRequests(ctx, func(name string, token int64) { resignRequested(s.jobs, name, token) })
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); s.keepHistory(ctx) }()
	<-ctx.Done() // also without jobs: the scheduler runs until it is stopped
	wg.Wait()
	// With no term to resign, nothing above waited for the deregistration;
	// the caller's Close would cut it short (bounded by a renew interval).
	<-s.leader.left
	s.rec.writes.Wait()
	s.log.Info("scheduler stopped")
	return nil
}

// watchGrace logs and counts an overrun of a job without terms (everywhere, or
// database mode) still running its grace period after shutdown began.
func (s *Scheduler) watchGrace(j *job, stopped <-chan struct{}) {
	grace := time.NewTimer(j.spec.Grace)
	defer grace.Stop()
	select {
	case <-stopped:
	case <-grace.C:
		s.m.overruns.WithLabelValues(j.spec.Name).Inc()
		j.log.Error(MsgShutdownOverrun, "grace", j.spec.Grace, "mode", j.mode)
	}
}

// MsgShutdownOverrun is the message of the log line (level ERROR, with job,
// instance and grace) for a job without terms still running its grace period
// after shutdown began.
const MsgShutdownOverrun = "job still running after its grace period at shutdown; the process will exit without it"
