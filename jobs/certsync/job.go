package certsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os/user"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/command"
	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/scheduler"
)

// Type is the certsync job type, for the scheduler's registry.
func Type() scheduler.Type {
	return scheduler.Type{
		Name:    "certsync",
		Doc:     "keeps a directory of certificate files (chain and key per domain) in sync with the renewer's certificates, on every server, for nginx or HAProxy",
		Options: configs.OptionsOf(DefaultOptions),
		New:     New,
		Modes:   []configs.Mode{configs.ModeEverywhere},
		ModeWhy: "every server keeps its own directory",
	}
}

// Back-off after a failed sync or reload: doubling, up to maxRetry.
const (
	minRetry = time.Second
	maxRetry = time.Minute
)

// Job is one configured certsync job. Its Run keeps the directory in sync
// until its context ends.
type Job struct {
	name   string
	opts   Options
	redact *command.Redactor // for what the reload command prints, and its arguments
	hide   []string          // the service's secret files, unreadable to the reload command
	gid    int               // the files' group; -1: the process's own
	src    *certserve.Certificates
	pool   *pgxpool.Pool
	m      *metrics

	// Run's goroutine only.
	written  map[string]int64 // domain → id of the certificate its file holds, as written or checked
	badNames map[string]bool  // domains refused as file names, logged once
	kept     map[string]bool  // files kept because PostgreSQL still holds their domain, logged once
	dirty    bool             // a reload is owed: the directory changed since the last successful one (see owe)
	// owedChecked: the first pass that could open the directory has read
	// whether an earlier run left a reload owed (owedBefore).
	owedChecked bool

	mu     sync.Mutex
	status Status
	synced chan struct{} // closed after the next sync
}

// Status is what the last sync left.
type Status struct {
	// Syncs counts the syncs done since the job started.
	Syncs int
	// Files maps each domain whose file the directory holds to the serial
	// (hex) of the certificate in it, "" when it is a file kept without
	// being served (see the package doc).
	Files map[string]string
	// Err is the last sync's error; nil when the directory matched the
	// certificates in memory.
	Err error
	// ReloadPending says a change still waits for a successful reload;
	// ReloadErr is the last reload's error.
	ReloadPending bool
	ReloadErr     error
}

// New builds a certsync job from its config entry.
func New(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
	if spec.Schedule.Kind != configs.Continuous {
		return nil, fmt.Errorf("certsync %q: needs continuous: true, not a %s schedule", spec.Name, spec.Schedule.Kind)
	}
	if env.Pool == nil {
		return nil, fmt.Errorf("certsync %q: needs PostgreSQL", spec.Name)
	}
	opts, err := configs.DecodeOptions(spec, DefaultOptions)
	if err != nil {
		return nil, err
	}
	keys, err := opts.KeySource().Load()
	if err != nil {
		return nil, fmt.Errorf("certsync %q: %w", spec.Name, err)
	}
	gid, err := lookupGroup(opts.Group)
	if err != nil {
		return nil, fmt.Errorf("certsync %q: %w", spec.Name, err)
	}
	log := env.Log // carries job and instance
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	src, err := newReader(env, spec.Name, log, keys)
	if err != nil {
		return nil, fmt.Errorf("certsync %q: %w", spec.Name, err)
	}
	m, err := newMetrics(env.Metrics, spec.Name)
	if err != nil {
		return nil, fmt.Errorf("certsync %q: metrics: %w", spec.Name, err)
	}
	redact := command.NewRedactor(knownSecrets(env.Pool.Config().ConnConfig.Password, opts))
	log.Info("certsync configured", "dir", opts.Dir, "group", opts.Group,
		"reload", redact.Args(opts.Reload), "settle", opts.Settle, "keys", keys)
	hide := command.Unreadable(log, "certsync: the reload command", env.Secrets)
	return &Job{name: spec.Name, opts: opts, redact: redact, hide: hide, gid: gid, src: src, pool: env.Pool, m: m,
		written: map[string]int64{}, badNames: map[string]bool{}, kept: map[string]bool{},
		synced: make(chan struct{})}, nil
}

// newReader is the job's own certificate source: a connection of its own,
// named for pg_stat_activity.
func newReader(env scheduler.Env, job string, log *slog.Logger, keys *keyring.Keyring) (*certserve.Certificates, error) {
	db := env.Pool.Config().ConnConfig.Copy()
	db.RuntimeParams["application_name"] = "snip-jobs certsync " + job + " " + env.Instance
	var reg prometheus.Registerer
	if env.Metrics != nil {
		reg = tolerant{env.Metrics}
	}
	return certserve.NewCertificates(certserve.Config{DB: db, Log: log, Metrics: reg}, keys)
}

// lookupGroup resolves group to a gid; -1 when it is empty.
func lookupGroup(group string) (int, error) {
	if group == "" {
		return -1, nil
	}
	if id, err := strconv.Atoi(group); err == nil && id >= 0 {
		return id, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("group %q: %w", group, err)
	}
	return strconv.Atoi(g.Gid)
}

// Run keeps the directory in sync until ctx ends: once everything has been
// read, then after each batch of changes, and after a back-off while
// something failed.
func (j *Job) Run(ctx context.Context, r *scheduler.Run) error {
	log := r.Log.With("dir", j.opts.Dir)
	rctx, stop := context.WithCancel(ctx)
	reader := make(chan struct{})
	go func() {
		defer close(reader)
		_ = j.src.Run(rctx)
	}()
	defer func() {
		stop()
		<-reader
	}()
	select {
	case <-j.src.Ready():
	case <-ctx.Done():
		return nil
	}
	var backoff time.Duration
	for {
		changed := j.src.Changed() // before the sync reads: a change during it makes another batch
		var retry <-chan time.Time // nil unless a retry is due
		var timer *time.Timer
		if j.pass(ctx, log) {
			backoff = 0
		} else {
			backoff = min(max(2*backoff, minRetry), maxRetry)
			timer = time.NewTimer(backoff)
			retry = timer.C
		}
		select {
		case <-ctx.Done():
			return nil
		case <-retry:
		case <-changed:
			if timer != nil {
				timer.Stop()
			}
			if !sleep.For(ctx, j.opts.Settle) {
				return nil
			}
		}
	}
}

// pass syncs the directory and reloads if it is owed; ok is false when
// something must be retried.
//
// A directory that cannot be used (see openExport) is left untouched, and
// a reload owed waits until it can be: the TLS server is not made to load
// whatever such a directory holds.
func (j *Job) pass(ctx context.Context, log *slog.Logger) (ok bool) {
	var files map[string]string
	var syncErr, reloadErr error
	d, err := j.openExport()
	if err != nil {
		j.dirError(ctx, log, err)
		syncErr = err
	} else {
		defer d.close()
		if !j.owedChecked {
			j.dirty = j.owedBefore(ctx, log, d)
			j.owedChecked = true
		}
		files, _, syncErr = j.sync(ctx, log, d)
		if j.dirty {
			if reloadErr = j.reload(ctx, log, d); reloadErr == nil {
				j.dirty = false
			}
		}
	}
	j.m.inSync.Set(boolGauge(syncErr == nil))
	j.m.reloadPending.Set(boolGauge(j.dirty))
	j.publish(func(s *Status) {
		s.Syncs++
		s.Files, s.Err, s.ReloadPending, s.ReloadErr = files, syncErr, j.dirty, reloadErr
	})
	return syncErr == nil && reloadErr == nil
}

// Synced returns a channel closed after the next sync: take it, read
// Status, then wait on it.
func (j *Job) Synced() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.synced
}

// Status returns what the last sync left.
func (j *Job) Status() Status {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.status
	s.Files = maps.Clone(s.Files)
	return s
}

func (j *Job) publish(update func(*Status)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	update(&j.status)
	close(j.synced)
	j.synced = make(chan struct{})
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// tolerant registers the reader's series once per process: a second
// certsync job (or the same job built again) keeps the first one's.
type tolerant struct{ prometheus.Registerer }

func (t tolerant) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			panic(err)
		}
	}
}
