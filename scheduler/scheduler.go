package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/scheduler/status"
)

// Config wires a Scheduler.
type Config struct {
	File     *configs.File
	Registry *Registry
	// Session is this process's etcd session. Required when a singleton runs in
	// leader mode (the default); nil is fine when every singleton uses database mode.
	Session *leadership.Session
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
	// (0: DefaultClaimTTL).
	ClaimTTL time.Duration
}

// Ending a lead for a reason of the scheduler's own (context causes).
var (
	errShutdown        = errors.New("shutdown")
	errWatchdog        = errors.New("watchdog: no progress within progress_timeout")
	errResignRequested = errors.New("resign requested by an operator")
	errRebalance       = errors.New("handing over to spread singletons over instances")
)

// PanicError is what a job's panic becomes; it ends the term by resignation.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("job panicked: %v", e.Value) }

type mode int

const (
	everywhere   mode = iota // not a singleton
	leaderMode               // singleton gated by an etcd term
	databaseMode             // singleton cron job decided by the unique slot row
)

func (m mode) String() string {
	return [...]string{"everywhere", "leader", "database"}[m]
}

// Scheduler runs the configured jobs. Create it with New, then call Run.
type Scheduler struct {
	cfg      Config
	instance string
	log      *slog.Logger
	fence    *fencing.Fence
	m        *metrics
	jobs     []*job

	leaderJobs int          // singletons in leader mode
	leading    atomic.Int64 // terms this instance holds now
	instances  atomic.Int64 // live instances, refreshed by the spread loop
	started    atomic.Bool
	// left is closed once this instance has deregistered at shutdown; terms
	// are resigned after it, so that their successors see it gone.
	left chan struct{}
	// recordWrites are the job_runs writes in flight (recordFinish).
	recordWrites sync.WaitGroup
}

// job is one configured job and its live state.
type job struct {
	spec configs.Job
	impl Job
	mode mode
	log  *slog.Logger

	progress atomic.Int64 // unix nanos, shared by the job's Runs

	mu        sync.Mutex
	term      *leadership.Term
	stop      context.CancelCauseFunc // ends the current lead
	holdUntil time.Time
	last      *status.RunRecord
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
	s.m = newMetrics(cfg.Metrics, cfg.Session)
	s.instances.Store(1)
	if cfg.Pool != nil {
		// A fenced write that has waited a second for a resource's row held by
		// an older term's transaction (a leader cut off with a slow or dead
		// database link) ends that transaction. A fenced transaction idle
		// (between statements) for three lease TTLs belongs to a leader that
		// has gone quiet or is cut off: PostgreSQL ends it whoever waits, so
		// that nothing waits for TCP to notice. Three TTLs leave room for a
		// slow link's round trips.
		idle := 30 * time.Second
		if cfg.Session != nil {
			idle = max(5*time.Second, 3*cfg.Session.Config().TTL)
		}
		s.fence = fencing.New(cfg.Pool, s.instance, fencing.WithIdleTimeout(idle),
			fencing.WithStaleHolderBreak(time.Second, func(h fencing.StaleHolder) {
				s.m.staleHolders.WithLabelValues(h.Resource).Inc()
				s.log.Warn("ended an older term's transaction holding the resource", "resource", h.Resource,
					"token", h.Token, "holder_token", h.HolderToken, "holder_pid", h.HolderPID)
			}),
			fencing.WithRejectHook(func(resource string, token, current int64) {
				s.m.rejections.WithLabelValues(resource).Inc()
				s.log.Warn("fenced write refused: a newer term has written", "resource", resource, "token", token, "current", current)
				s.bookkeep(context.Background(), sqlRejection,
					resource, token, current, s.instance)
			}))
	}
	env := Env{Instance: s.instance, Pool: cfg.Pool, Log: s.log, Metrics: cfg.Metrics, Mux: cfg.Mux}
	var errs []error
	for _, spec := range cfg.File.Jobs {
		j, err := s.newJob(env, spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: job %q: %w", spec.Pos, spec.Name, err))
			continue
		}
		s.jobs = append(s.jobs, j)
		if j.mode == leaderMode {
			s.leaderJobs++
			// Exported from the start, so that "nobody leads it" (every
			// instance's 0) is a series before any term, and the first term
			// start counts as an increase.
			s.m.leader.WithLabelValues(spec.Name).Set(0)
			s.m.termStarts.WithLabelValues(spec.Name)
		}
	}
	return s, errors.Join(errs...)
}

func (s *Scheduler) newJob(env Env, spec configs.Job) (*job, error) {
	t, ok := s.cfg.Registry.Type(spec.Type)
	if !ok {
		return nil, fmt.Errorf("unknown job type %q", spec.Type)
	}
	j := &job{spec: spec, log: s.log.With("job", spec.Name)}
	switch {
	case !spec.Singleton:
		j.mode = everywhere
	case spec.Schedule.Kind == configs.Cron && spec.Schedule.Coordination == configs.Database:
		j.mode = databaseMode
	default:
		j.mode = leaderMode
	}
	switch {
	case j.mode == leaderMode && s.cfg.Session == nil:
		return nil, errors.New("a singleton in leader mode needs etcd (no leadership session)")
	case (j.mode != everywhere || spec.Schedule.Kind == configs.Cron) && s.cfg.Pool == nil:
		return nil, errors.New("needs PostgreSQL (fenced writes and durable slots), but no database is configured")
	}
	env.Log = j.log
	impl, err := t.New(env, spec)
	if err != nil {
		return nil, err
	}
	j.impl = impl
	j.progress.Store(time.Now().UnixNano())
	return j, nil
}

// Run runs every job until ctx ends, then cancels them, waits for each up to
// its grace period, resigns every term, and returns. Close the leadership
// session afterwards to revoke the lease.
func (s *Scheduler) Run(ctx context.Context) error {
	s.started.Store(true)
	s.left = make(chan struct{})
	stopLeave := context.AfterFunc(ctx, func() {
		defer close(s.left)
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
	for _, j := range s.jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if j.mode == leaderMode {
				s.runLeader(ctx, j) // bounds each term's run by the grace itself
				return
			}
			stopped := make(chan struct{})
			defer close(stopped)
			stopWatch := context.AfterFunc(ctx, func() { s.watchGrace(j, stopped) })
			defer stopWatch()
			if j.mode == everywhere {
				s.runEverywhere(ctx, j)
			} else {
				s.runDatabase(ctx, j)
			}
		}()
	}
	if s.leaderJobs > 0 {
		wg.Add(2)
		go func() { defer wg.Done(); s.spreadLoop(ctx) }()
		go func() { defer wg.Done(); s.cfg.Session.WatchResignRequests(ctx, s.resignRequested) }()
	}
	<-ctx.Done() // also without jobs: the scheduler runs until it is stopped
	wg.Wait()
	s.recordWrites.Wait()
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

// runEverywhere runs a job that is not a singleton, on this instance, until ctx ends.
func (s *Scheduler) runEverywhere(ctx context.Context, j *job) {
	mk := func(slot time.Time) *Run { return s.newRun(j, 0, slot, "", nil) }
	_ = s.schedule(ctx, j, mk, 0, nil)
}

// runLeader campaigns for the job and leads each term won, until ctx ends.
func (s *Scheduler) runLeader(ctx context.Context, j *job) {
	hold := leadership.WithHoldback(func() time.Duration { return s.holdback(j) })
	for ctx.Err() == nil {
		term, err := s.cfg.Session.Campaign(ctx, j.spec.Name, hold)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			j.log.Error("campaign failed; retrying", "err", err)
			sleep.For(ctx, time.Second)
			continue
		}
		cause := s.lead(ctx, j, term)
		if handedOver(cause) {
			// Let another instance win this one first.
			j.mu.Lock()
			j.holdUntil = time.Now().Add(2 * s.spreadDelay())
			j.mu.Unlock()
		}
	}
}

// lead runs the job's schedule for the duration of one term, then stops it and
// resigns. It returns why the lead ended.
func (s *Scheduler) lead(ctx context.Context, j *job, term *leadership.Term) error {
	log := j.log.With("token", term.Token())
	jctx, stop := context.WithCancelCause(term.Context())
	defer stop(nil)
	unlink := context.AfterFunc(ctx, func() { stop(errShutdown) })
	defer unlink()

	j.mu.Lock()
	j.term, j.stop = term, stop
	j.mu.Unlock()
	j.progress.Store(time.Now().UnixNano())
	s.leading.Add(1)
	s.m.leader.WithLabelValues(j.spec.Name).Set(1)
	s.m.token.WithLabelValues(j.spec.Name).Set(float64(term.Token()))
	s.m.termStarts.WithLabelValues(j.spec.Name).Inc()
	log.Info("leading", "lease", int64(term.Lease()))
	// Recorded before the job starts (the history's clock is the database's);
	// closed after the term is over.
	s.bookkeep(ctx, sqlTermStart, j.spec.Name, term.Token(), s.instance)

	mk := func(slot time.Time) *Run { return s.newRun(j, term.Token(), slot, "", term.Valid) }
	done := make(chan error, 1)
	go func() { done <- s.schedule(jctx, j, mk, term.Token(), term.Valid) }()

	var watchdog <-chan time.Time
	if pt := j.spec.ProgressTimeout; pt > 0 {
		t := time.NewTicker(max(pt/4, 10*time.Millisecond))
		defer t.Stop()
		watchdog = t.C
	}
	var ended error
wait:
	for {
		select {
		case err := <-done:
			done = nil
			ended = err
			if err == nil {
				err = errors.New("schedule returned")
			}
			stop(err)
			break wait
		case <-jctx.Done():
			break wait
		case <-watchdog:
			if silent := time.Since(time.Unix(0, j.progress.Load())); silent > j.spec.ProgressTimeout {
				s.m.watchdog.WithLabelValues(j.spec.Name).Inc()
				log.Warn("no progress reported; resigning", "silent_for", silent.Round(time.Millisecond), "progress_timeout", j.spec.ProgressTimeout)
				stop(errWatchdog)
			}
		}
	}
	cause := context.Cause(jctx)
	// How the hand-over's time is spent, for the "term over" line.
	ending := time.Now()
	var stopped, recorded, resigned time.Duration
	if done != nil {
		grace := time.NewTimer(j.spec.Grace)
		select {
		case ended = <-done:
		case <-grace.C:
			s.m.overruns.WithLabelValues(j.spec.Name).Inc()
			log.Error(MsgOverrun, "grace", j.spec.Grace, "cause", cause)
		}
		grace.Stop()
	}
	if ended != nil && errors.As(ended, new(*PanicError)) {
		cause = ended
	}

	stopped = time.Since(ending)
	// Hand over at once. Resign is guarded by the token: if a successor already
	// holds the key, it is left alone. At shutdown, deregister first.
	if errors.Is(cause, errShutdown) {
		<-s.left
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if err := term.Resign(rctx); err != nil {
		log.Warn("resign failed; the successor waits for the lease", "err", err)
	}
	cancel()
	resigned = time.Since(ending)
	// The end is recorded after the hand-over, off its path: under load that
	// write took up to ~90 ms. Its successor may record its start first;
	// History puts a handed-over term's end no later than that start.
	s.bookkeep(ctx, sqlTermEnd, j.spec.Name, term.Token(), endLabel(cause, term))
	recorded = time.Since(ending)

	j.mu.Lock()
	j.term, j.stop = nil, nil
	j.mu.Unlock()
	s.leading.Add(-1)
	s.m.leader.WithLabelValues(j.spec.Name).Set(0)
	s.m.token.WithLabelValues(j.spec.Name).Set(0)
	s.m.termEnds.WithLabelValues(j.spec.Name, endLabel(cause, term)).Inc()
	log.Info("term over", "why", endLabel(cause, term), "cause", cause, "held_for", time.Since(term.Started()).Round(time.Millisecond),
		"job_stopped_after", stopped, "resigned_after", resigned, "recorded_after", recorded)
	return cause
}

// MsgOverrun is the message of the log line (level ERROR, with job, instance,
// token, grace and cause) for a run still going after the grace period that
// followed the end of its term.
const MsgOverrun = "job still running after its grace period; its fenced writes will be refused"

// handedOver reports whether a lead ended by this instance's choice while the
// term was still good: watchdog, panic, operator request or spread.
func handedOver(cause error) bool {
	return errors.Is(cause, errWatchdog) || errors.Is(cause, errResignRequested) ||
		errors.Is(cause, errRebalance) || errors.As(cause, new(*PanicError))
}

// endLabel names why a lead ended, for metrics and logs.
func endLabel(cause error, term *leadership.Term) string {
	switch {
	case errors.Is(cause, errShutdown):
		return status.EndShutdown
	case errors.Is(cause, errWatchdog):
		return status.EndWatchdog
	case errors.Is(cause, errResignRequested):
		return status.EndResignRequest
	case errors.Is(cause, errRebalance):
		return status.EndRebalance
	case errors.As(cause, new(*PanicError)):
		return status.EndPanic
	case errors.Is(cause, fencing.ErrStaleToken):
		return status.EndFenced
	}
	if r := leadership.ReasonOf(cause); r != "" {
		return string(r)
	}
	if r := term.Reason(); r != "" {
		return string(r)
	}
	return "ended"
}

// newRun builds the Run handed to the job. resource "" means the job's name.
func (s *Scheduler) newRun(j *job, token int64, slot time.Time, resource string, valid func() bool) *Run {
	var fence *fencing.Fence
	if token > 0 {
		fence = s.fence
	}
	r := NewRun(RunConfig{
		Job: j.spec.Name, Instance: s.instance, Token: token, Slot: slot,
		Fence: fence, Resource: resource, Valid: valid, Log: s.cfg.Log, // NewRun adds job, instance, token
	})
	r.progress = &j.progress
	r.Progress()
	return r
}

// call runs the job once, recovering a panic, and records the run.
func (s *Scheduler) call(ctx context.Context, j *job, r *Run) (err error) {
	rec := s.recordStart(ctx, j, r)
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
			r.Log.Error("job panicked", "panic", p, "stack", string(err.(*PanicError).Stack))
		}
		result := classify(ctx, err)
		s.m.runs.WithLabelValues(j.spec.Name, result).Inc()
		s.recordFinish(j, rec, result, err)
		switch result {
		case "ok", "cancelled":
			r.Log.Debug("run finished", "result", result)
		default:
			r.Log.Warn("run finished", "result", result, "err", err)
		}
	}()
	return j.impl.Run(ctx, r)
}

func classify(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, new(*PanicError)):
		return "panic"
	case errors.Is(err, fencing.ErrStaleToken), errors.Is(err, ErrTermEnded):
		return "stale"
	case ctx.Err() != nil:
		return "cancelled"
	default:
		return "error"
	}
}

// holdback is how long the job's next campaign attempt waits: while the job is
// on hold after a voluntary hand-over, or while this instance leads at least
// its fair share and another live instance leads fewer (that one should win).
// It reads the cluster's load fresh from etcd, so a job freed by a crash or a
// shutdown is taken at once by instances that are all equally loaded.
func (s *Scheduler) holdback(j *job) time.Duration {
	j.mu.Lock()
	hold := time.Until(j.holdUntil)
	j.mu.Unlock()
	if hold > 0 {
		return hold
	}
	mine := s.leading.Load()
	if mine == 0 {
		return 0
	}
	load, err := s.clusterLoad()
	if err != nil || mine < fairShare(s.leaderJobs, len(load)) {
		return 0
	}
	for name, n := range load {
		if name != s.instance && int64(n) < mine {
			s.m.holdbacks.WithLabelValues(j.spec.Name).Inc()
			return s.spreadDelay()
		}
	}
	return 0
}

// clusterLoad counts the terms each live (registered) instance leads, from
// etcd, bounded by a renew interval: it sits on the path of every hand-over.
func (s *Scheduler) clusterLoad() (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Session.Config().RenewInterval)
	defer cancel()
	return s.cfg.Session.ClusterLoad(ctx)
}

func (s *Scheduler) fairShare() int64 { return fairShare(s.leaderJobs, int(s.instances.Load())) }

// fairShare is ceil(singletons / instances).
func fairShare(singletons, instances int) int64 {
	n := int64(max(instances, 1))
	return (int64(singletons) + n - 1) / n
}

// spreadDelay gives instances with fewer terms time to win first: far longer
// than an etcd round trip, far shorter than a TTL.
func (s *Scheduler) spreadDelay() time.Duration {
	return max(500*time.Millisecond, s.cfg.Session.Config().RenewInterval/2)
}

func (s *Scheduler) claimTTL() time.Duration {
	if s.cfg.ClaimTTL > 0 {
		return s.cfg.ClaimTTL
	}
	return DefaultClaimTTL
}

// records is the pool the scheduler's own records are written through.
func (s *Scheduler) records() *pgxpool.Pool {
	if s.cfg.Records != nil {
		return s.cfg.Records
	}
	return s.cfg.Pool
}

// bookkeep runs one best-effort statement of the scheduler's own records
// (job_terms, fence_rejections): bounded by a second, done even at shutdown,
// and its failure never stops a job.
func (s *Scheduler) bookkeep(ctx context.Context, sql string, args ...any) {
	records := s.records()
	if records == nil {
		return
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if _, err := records.Exec(bctx, sql, args...); err != nil {
		s.log.Debug("bookkeeping write failed", "err", err)
	}
}
