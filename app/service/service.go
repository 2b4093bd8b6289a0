// Package service is snip-jobs run: it starts what the config asks for
// (the PostgreSQL pools, etcd or its embedded member — or, with
// leadership.backend: kubernetes, a client of the API server — the session, the
// scheduler, the admin server and the job types' listeners), tells systemd
// when it is ready and healthy, and on the first signal stops the jobs
// within their grace, resigns every term and revokes the lease, so that
// another instance leads at once. cmd/snip-jobs wraps it in flags.
//
// What it does not do: restart itself (systemd's Restart= does), or decide
// anything about a job (the scheduler does).
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/snip/snip-jobs/app/admin"
	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/app/etcdlocal"
	"github.com/snip/snip-jobs/app/statuspage"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/migrations"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/status"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Bounds of start-up and shutdown steps that the config does not set.
const (
	dbPingTimeout    = 5 * time.Second
	schemaTimeout    = 10 * time.Second // one comparison of the schema with the binary's migrations
	schemaRetry      = time.Second      // between comparisons while PostgreSQL does not answer
	minStartTimeout  = 30 * time.Second // WaitReady: at least this, or 3 TTLs
	closeGrace       = 3 * time.Second  // each closing step once shutdown_timeout has passed
	stuckLeaseFactor = 3                // watchdog: no lease for this many TTLs while etcd answers = stuck
)

// CheckFiles is what run says of the files the config names
// (configs.File.CheckFiles), and validate repeats: an error listing every
// file it will not start with, each at the file:line:col of its setting (not
// a regular file, larger than it may be, a secret writable by its group or
// others, or readable by them unless allowReadable, --allow-readable-secrets),
// or the secret files others may read that allowReadable lets it start with,
// each to be warned of.
func CheckFiles(f *configs.File, allowReadable bool) (warnings []configs.FileProblem, err error) {
	var refused []string
	readable := false
	for _, p := range f.CheckFiles() {
		switch {
		case p.OnlyReadable() && allowReadable:
			warnings = append(warnings, p)
		case p.OnlyReadable():
			readable = true
			refused = append(refused, p.Line())
		default:
			refused = append(refused, p.Line())
		}
	}
	if len(refused) == 0 {
		return warnings, nil
	}
	hint := ""
	if readable {
		hint = "\n(for the files others can only read, start with --allow-readable-secrets to run with a warning for each instead)"
	}
	return warnings, fmt.Errorf("%s: the files it names must be regular files no larger than they may be, "+
		"and secret files must be readable by their owner only and writable by no one else:\n%s%s", f.Path, strings.Join(refused, "\n"), hint)
}

// ReadableSecretWarning is logged by run, and said by validate, for each
// secret file others may read that --allow-readable-secrets allows.
const ReadableSecretWarning = "secret file readable by other users (allowed by --allow-readable-secrets)"

// checkFiles refuses the files CheckFiles refuses, and logs a warning for
// each it allows.
func checkFiles(f *configs.File, allow bool, log *slog.Logger) error {
	warnings, err := CheckFiles(f, allow)
	for _, p := range warnings {
		log.Warn(ReadableSecretWarning, "file", p.Path, "setting", p.Key, "at", p.Pos.String(),
			"job", p.Job, "mode", fmt.Sprintf("%04o", p.Mode.Perm()), "problem", p.String())
	}
	return err
}

// Options are what `snip-jobs run` is given: the loaded config, the job
// types built in, and what its flags and service manager pass.
type Options struct {
	Config  *configs.File
	Types   *scheduler.Registry
	Version string       // logged at start and shown on /status
	Log     *slog.Logger // the configured logger; the service adds the instance
	// EmbeddedListen is the embedded etcd's client address, used only when the
	// config names no etcd endpoints.
	EmbeddedListen string
	// DevControl is snip-dev's supervisor, for the status page's buttons.
	DevControl string
	// Sockets are those the service manager passed (InheritSockets).
	Sockets Sockets
	// AllowReadableSecrets starts with a warning for each secret file its
	// group or others may read, instead of refusing to start (never one they
	// may write, nor one that is not a regular file or is too large).
	AllowReadableSecrets bool
	// Undrain lifts this instance's drain (snip-jobs drain) at start, before
	// its jobs run (run --undrain).
	Undrain bool
}

// NoJobsWarning is said by validate and run of a file without jobs: allowed
// (a server being set up), but a truncated deploy looks the same.
const NoJobsWarning = "no jobs: this instance will run nothing (is the file complete?)"

// Run runs the service until ctx ends (the first signal) or something fails,
// then shuts down. A nil error means a clean stop.
func Run(ctx context.Context, o Options) error {
	r := &runner{cfg: o.Config, types: o.Types, version: o.Version, log: o.Log,
		embeddedListen: o.EmbeddedListen, devControl: o.DevControl, socks: o.Sockets, undrainAtStart: o.Undrain}
	r.ilog = r.log.With("instance", o.Config.Instance)
	if err := checkFiles(o.Config, o.AllowReadableSecrets, r.ilog); err != nil {
		return err
	}
	return r.run(ctx)
}

// runner is one `snip-jobs run` process: what it started, for shutdown.
type runner struct {
	cfg            *configs.File
	types          *scheduler.Registry
	version        string
	log            *slog.Logger // the scheduler and the session add the instance themselves
	ilog           *slog.Logger // log with the instance, for this file's lines
	embeddedListen string
	devControl     string  // snip-dev's supervisor, for the status page's buttons
	socks          Sockets // passed by the service manager; taken by the admin and challenge servers
	notify         notifier

	pool     *pgxpool.Pool
	records  *pgxpool.Pool // the scheduler's own records (scheduler.Config.Records)
	embedded *etcdlocal.Server
	etcd     *clientv3.Client        // nil with the kubernetes backend
	session  *leadership.Session     // nil without singletons led through terms
	view     status.LeadershipReader // the status page's read of the session's backend; nil without one
	terms    scheduler.Session
	// reach says whether the session's server answers (the watchdog's
	// question when no lease comes); where names it, for messages.
	reach   func(ctx context.Context) error
	where   string
	sched   *scheduler.Scheduler
	started atomic.Pointer[scheduler.Scheduler] // sched, for the admin server's readiness checks
	admin   *admin.Server

	undrainAtStart bool           // run --undrain
	listens        *typeListeners // the job types' own sockets (certrenew's HTTP-01 challenges)

	starting     atomic.Bool // start has not returned yet (watchSignals)
	schedRunning atomic.Bool
	lastLease    atomic.Int64 // unix nanos when the session was last seen holding a lease

	schemaErr       chan error         // the schema lacks migrations, found after start-up
	schemaPending   atomic.Bool        // the schema is still to be compared (PostgreSQL has not answered yet)
	stopSchemaCheck context.CancelFunc // ends a schema comparison waiting for PostgreSQL; nil when none
}

// run starts everything, runs until ctx ends (the first signal) or something
// fails, and shuts down. A nil error means a clean stop.
func (r *runner) run(ctx context.Context) error {
	r.notify = notifier{log: r.ilog}
	r.schemaErr = make(chan error, 1)
	// ctx ends at the first signal (main's); watchSignals ends the process
	// at the second, or when start-up outlives shutdown_timeout after it.
	sigs := make(chan os.Signal, 2)
	defer close(sigs)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs) // before the close above
	r.starting.Store(true)
	go r.watchSignals(sigs, os.Exit)

	err := r.start(ctx)
	r.starting.Store(false)
	if err != nil {
		r.shutdown(nil, nil)
		if ctx.Err() != nil {
			r.ilog.Info("stopped during start-up")
			return nil
		}
		return err
	}
	select {
	case err := <-r.schemaErr: // PostgreSQL answered during start-up
		r.shutdown(nil, nil)
		return err
	default:
	}

	runCtx, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopJobs()
	schedDone := make(chan struct{})
	r.schedRunning.Store(true)
	go func() {
		defer close(schedDone)
		_ = r.sched.Run(runCtx)
		r.schedRunning.Store(false)
	}()
	r.ready(ctx)
	wdCtx, stopWatchdog := context.WithCancel(runCtx)
	defer stopWatchdog()
	wdDone := make(chan struct{})
	go func() {
		defer close(wdDone)
		r.notify.watchdog(wdCtx, r.healthy, r.statusLine)
	}()

	var sessionDone <-chan struct{}
	if r.session != nil {
		sessionDone = r.session.Done()
	}
	var failure error
	select {
	case <-ctx.Done():
	case <-sessionDone:
		failure = fmt.Errorf("the %s session stopped: %w", r.cfg.Leadership.Backend, r.session.Err())
	case <-schedDone:
		failure = errors.New("the scheduler stopped by itself")
	case failure = <-r.schemaErr:
	}
	if failure != nil {
		r.ilog.Error("shutting down", "err", failure)
	}
	stopWatchdog()
	<-wdDone // no ping after STOPPING=1
	if err := r.shutdown(stopJobs, schedDone); err != nil && failure == nil {
		failure = err
	}
	if failure == nil {
		r.ilog.Info("stopped cleanly")
	}
	return failure
}

// ready tells systemd the service is ready once the scheduler has read the
// operators' controls (no job runs before): a moment, unless PostgreSQL does
// not answer (then /readyz says so anyway, and it is ready after
// dbPingTimeout all the same).
func (r *runner) ready(ctx context.Context) {
	wctx, cancelWait := context.WithTimeout(ctx, dbPingTimeout)
	if err := r.sched.WaitControls(wctx); err != nil && ctx.Err() == nil {
		r.ilog.Warn("the operators' controls are not read yet: no job runs until they are (PostgreSQL?)", "waited", dbPingTimeout)
	}
	cancelWait()
	r.ilog.Info("running", "jobs", len(r.cfg.Jobs), "admin", r.admin.Addr().String())
	if len(r.cfg.Jobs) == 0 {
		r.ilog.Warn(NoJobsWarning, "config", r.cfg.Path)
	}
	r.notify.ready(r.statusLine())
}

// watchSignals follows the signals run receives (sigs, closed when it
// returns): it logs the first (which ends run's context, and so start-up
// and then the service, within shutdown_timeout), ends the process with
// exit at a second one, and also when start-up has still not returned
// shutdown_timeout after the first: a start-up step that does not heed its
// context (a read that blocks, a library that waits) must not keep the
// process deaf to SIGTERM.
func (r *runner) watchSignals(sigs <-chan os.Signal, exit func(int)) {
	sig, ok := <-sigs
	if !ok {
		return
	}
	r.ilog.Info("signal received: shutting down", "signal", sig.String(), "shutdown_timeout", r.cfg.ShutdownTimeout)
	stuck := time.NewTimer(r.cfg.ShutdownTimeout)
	defer stuck.Stop()
	for {
		select {
		case sig, ok = <-sigs:
			if !ok {
				return
			}
			r.ilog.Error("second signal: exiting now, without a clean shutdown", "signal", sig.String())
			exit(1)
		case <-stuck.C:
			if r.starting.Load() {
				r.ilog.Error("start-up has not stopped within shutdown_timeout of the signal: exiting now, without a clean shutdown",
					"shutdown_timeout", r.cfg.ShutdownTimeout)
				exit(1)
			}
		}
	}
}

// start brings up the database pools, the admin server and the job types'
// listeners, then compares the schema, starts etcd, the session and the
// scheduler, and waits for the first lease.
func (r *runner) start(ctx context.Context) error {
	f := r.cfg
	r.ilog.Info("starting", "version", r.version, "config", f.Path)
	if err := r.openPools(ctx); err != nil {
		return err
	}
	// The listeners come first, before anything waits on PostgreSQL or etcd:
	// while either does not answer, /healthz answers and /readyz says what
	// is missing (the schema not yet compared, no lease), and the HTTP-01
	// challenge listener answers.
	r.schemaPending.Store(true)
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
	)
	mux := http.NewServeMux()
	page, session, err := r.startAdmin(reg, mux)
	if err != nil {
		return err
	}
	env := scheduler.Env{Instance: f.Instance, Pool: r.pool, Log: r.ilog, Metrics: reg}
	if r.listens, err = startListeners(f, r.types, env, r.socks); err != nil {
		return err
	}
	if err := r.checkDatabase(ctx); err != nil {
		return err
	}
	if r.undrainAtStart {
		r.undrain(ctx)
	}

	// One bound for the whole wait for etcd: logging in, then the first lease.
	wait := max(minStartTimeout, 3*f.Leadership.TTL)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if connect.NeedsTerms(f) {
		start := func() error { return r.startEtcd(ctx, wctx, wait) }
		if f.Leadership.Backend == configs.BackendKubernetes {
			start = r.startKube
		}
		if err := start(); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		session.set(r.session)
	} else {
		b := string(f.Leadership.Backend)
		r.ilog.Info("no job is led through " + b + " (no singleton outside database mode): not using " + b)
	}
	if err := r.startScheduler(reg, mux, page); err != nil {
		return err
	}
	return r.waitFirstLease(ctx, wctx, wait)
}

// openPools opens the pools, without waiting for PostgreSQL: a pool
// connects when a connection is first needed (the records pool in the
// background at once).
func (r *runner) openPools(ctx context.Context) error {
	pool, err := connect.Pool(ctx, r.cfg, "run")
	if err != nil {
		return fmt.Errorf("%w (run needs PostgreSQL: set it in the environment or the file the config names)", err)
	}
	r.pool = pool
	// Two connections, kept open and warm: a term's start or end and a run's
	// record may be written at once.
	r.records, err = connect.Pool(ctx, r.cfg, "records", func(c *pgxpool.Config) {
		c.MaxConns, c.MinConns, c.AfterConnect = 2, 2, scheduler.WarmRecords
	})
	return err
}

// checkDatabase compares the schema with the binary's migrations (or
// applies them, with migrate_on_start); a database that does not answer yet
// is compared once it does (checkSchemaLater).
func (r *runner) checkDatabase(ctx context.Context) error {
	f := r.cfg
	pingErr := connect.Ping(ctx, r.pool, dbPingTimeout)
	if pingErr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.ilog.Warn("PostgreSQL does not answer yet; jobs that need it fail and retry until it does", "err", pingErr)
	}
	switch {
	case f.Postgres.MigrateOnStart:
		url, err := f.DatabaseURL()
		if err != nil {
			return fmt.Errorf("database URL: %w", err)
		}
		if _, err := migrations.Up(ctx, url, r.ilog); err != nil {
			return fmt.Errorf("migrate on start: %w", err)
		}
		r.schemaPending.Store(false)
	case pingErr != nil:
		r.checkSchemaLater(ctx)
	default:
		err := r.checkSchema(ctx)
		var cannot *schemaUncheckedError
		switch {
		case errors.As(err, &cannot):
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.ilog.Warn("cannot compare the database schema with this binary's migrations yet; trying again until it can", "err", cannot.err)
			r.checkSchemaLater(ctx)
		case err != nil:
			return err
		default:
			r.schemaPending.Store(false)
		}
	}
	return nil
}

// startAdmin starts the admin server before the scheduler and the etcd
// session exist: the page and the session it shows are set once they do.
func (r *runner) startAdmin(reg *prometheus.Registry, mux *http.ServeMux) (*lateHandler, *lateSession, error) {
	f := r.cfg
	page := &lateHandler{}
	acfg := admin.Config{
		Listen: f.HTTP.Listen, Listener: r.socks.take(socketAdmin), AllowedHosts: f.HTTP.AllowedHosts,
		Mux: mux, Gatherer: reg, Instance: f.Instance, Version: r.version,
		DB: r.pool, Page: page, Log: r.ilog,
		Checks: []admin.Check{{Name: "schema", Err: r.schemaReady}, {Name: "controls", Err: r.controlsReady}},
	}
	session := &lateSession{}
	if connect.NeedsTerms(f) {
		acfg.Session, acfg.SessionName = session, string(f.Leadership.Backend)
	}
	a, err := admin.New(acfg)
	if err != nil {
		return nil, nil, err
	}
	if err := a.Start(); err != nil {
		return nil, nil, err
	}
	r.admin = a
	return page, session, nil
}

// startScheduler builds the scheduler and the status page, and hands them to
// the admin server. Job types get the mux after the admin routes are on it:
// a conflicting route panics in ServeMux, at start.
func (r *runner) startScheduler(reg *prometheus.Registry, mux *http.ServeMux, page *lateHandler) error {
	f := r.cfg
	sched, err := scheduler.New(scheduler.Config{
		File: f, Registry: r.types, Session: r.terms, Pool: r.pool, Records: r.records, Log: r.log, Metrics: reg, Mux: mux,
		Secrets: f.SecretPaths(os.Getenv),
	})
	if err != nil {
		return err
	}
	r.sched = sched
	r.started.Store(sched)
	r.admin.SetJobs(sched)
	pc := statuspage.Config{
		Instance: f.Instance, Version: r.version, Leadership: r.view, Pool: r.pool,
		Jobs: f.Jobs, DevControl: r.devControl,
	}
	p, err := statuspage.New(pc, r.ilog)
	if err != nil {
		return err
	}
	page.set(p)
	return nil
}
