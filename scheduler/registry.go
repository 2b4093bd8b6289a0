package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/configs"
)

// Job is the code of a job. Run does one execution: for a continuous job, until
// ctx ends; for interval and cron jobs, one pass. ctx ends when the run's term
// ends (singletons), at shutdown, or when the watchdog fires; pass it to every
// I/O call.
type Job interface {
	Run(ctx context.Context, r *Run) error
}

// Waker is implemented by interval jobs that may be due before their
// interval has passed (the certificate renewer, when a domain is added).
// While the scheduler waits for the next run, it calls Wake with a context
// that ends with the wait; a receive on the channel runs the job at once.
type Waker interface {
	Wake(ctx context.Context) <-chan struct{}
}

// Settler is implemented by jobs whose runs start processes of their own
// (the exec type's programs). Settled returns a channel closed once no such
// process of the job is alive on this instance (proven: waited for). The
// lifecycle does not campaign for the job before: a term of it starts only
// once this instance's earlier programs are gone, whatever ended their
// term.
type Settler interface {
	Settled() <-chan struct{}
}

// JobFunc adapts a function to Job.
type JobFunc func(ctx context.Context, r *Run) error

// Run calls f.
func (f JobFunc) Run(ctx context.Context, r *Run) error { return f(ctx, r) }

// Type is a kind of job, registered under the name the config's `type:` uses.
// It declares what its jobs need: the modes they may run in, the options they
// take and the sockets they serve on every instance.
type Type struct {
	Name string
	// Doc is one line saying what the job does.
	Doc string
	// Options reads a job's `options:` (usually configs.OptionsOf with the
	// type's defaults); the config loader calls it on every job of the type,
	// so that bad options are reported at their file:line. nil: the type
	// takes none.
	Options configs.OptionsType
	// New builds the job from its config entry (its mode one of Modes, its
	// options checked by Options); it decodes spec.Options itself
	// (configs.DecodeOptions). Call it through Build.
	New func(env Env, spec configs.Job) (Job, error)
	// Defaults fill in what the type's config entries leave out (a
	// schedule, catch-up settings).
	Defaults configs.Defaults
	// Modes are the modes the type's jobs may run in (configs.Job.Mode);
	// empty: any. ModeWhy says why, in the error for a job in another.
	Modes   []configs.Mode
	ModeWhy string
	// Listeners are sockets the type serves on every instance, whether or not
	// its jobs run there; the service opens them (see Listener).
	Listeners []Listener
}

// Build checks spec's mode against t.Modes, then builds the job with t.New.
func (t Type) Build(env Env, spec configs.Job) (Job, error) {
	if err := t.checkMode(spec); err != nil {
		return nil, err
	}
	return t.New(env, spec)
}

func (t Type) checkMode(spec configs.Job) error {
	mode := spec.Mode()
	if len(t.Modes) == 0 || slices.Contains(t.Modes, mode) {
		return nil
	}
	switch {
	case !slices.Contains(t.Modes, configs.ModeEverywhere):
		return fmt.Errorf("%s %q: must be a singleton: %s", t.Name, spec.Name, t.ModeWhy)
	case len(t.Modes) == 1:
		return fmt.Errorf("%s %q: must not be a singleton (set singleton: false): %s", t.Name, spec.Name, t.ModeWhy)
	}
	return fmt.Errorf("%s %q: cannot run in %s mode: %s", t.Name, spec.Name, mode, t.ModeWhy)
}

// Listener is a socket a job type serves on every instance, not only where its
// jobs run: certrenew's HTTP-01 challenges, which the CA may send to any
// server behind a domain. The service opens the sockets of each configured
// type's jobs before the scheduler starts, and calls Serve once with them all.
type Listener struct {
	// Name says what the socket serves, in messages ("HTTP-01 challenge").
	Name string
	// Socket is the name a service manager may pass the socket under
	// (systemd's FileDescriptorName=): a passed socket replaces every Addr.
	Socket string
	// Addr is where a job of the type listens ("" for nowhere), as its option
	// Option says; jobs naming the same address share one socket.
	Addr   func(spec configs.Job) (string, error)
	Option string
	// Serve serves socks (at least one) until stop is called.
	Serve func(env Env, socks []Socket) (stop func(context.Context), err error)
}

// Socket is one open socket of a Listener, for the job that named it (the
// first of the type's jobs for a passed one).
type Socket struct {
	Job      string
	From     string // "passed socket", or the option naming the address
	Listener net.Listener
}

// Env is what a job may use besides its Run.
type Env struct {
	Instance string
	Pool     *pgxpool.Pool // nil only in tests of jobs that need no database
	Log      *slog.Logger
	Metrics  prometheus.Registerer
	// Mux is served on every instance's admin listener (status, metrics). Job
	// types may add their own routes at New.
	Mux *http.ServeMux
	// Secrets are the paths holding the service's secrets
	// (configs.File.SecretPaths), which no process a job starts may read.
	Secrets []string
}

// Registry maps type names to Types. It implements configs.Types.
type Registry struct {
	types map[string]Type
}

// NewRegistry registers types; names must be unique and non-empty.
func NewRegistry(types ...Type) (*Registry, error) {
	r := &Registry{types: map[string]Type{}}
	for _, t := range types {
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("scheduler: job type without a name")
		case t.New == nil:
			return nil, fmt.Errorf("scheduler: job type %q has no New", t.Name)
		}
		for _, l := range t.Listeners {
			if l.Serve == nil || (l.Addr == nil && l.Socket == "") {
				return nil, fmt.Errorf("scheduler: job type %q: listener %q needs Serve, and Addr or Socket", t.Name, l.Name)
			}
		}
		if _, dup := r.types[t.Name]; dup {
			return nil, fmt.Errorf("scheduler: job type %q registered twice", t.Name)
		}
		r.types[t.Name] = t
	}
	return r, nil
}

// Options implements configs.Types.
func (r *Registry) Options(name string) (configs.OptionsType, bool) {
	t, ok := r.types[name]
	return t.Options, ok
}

// Names implements configs.Types.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.types))
	for n := range r.types {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Defaults implements configs.TypeDefaults.
func (r *Registry) Defaults(name string) configs.Defaults { return r.types[name].Defaults }

// Sockets are the names of the sockets the types' listeners may be passed
// under, sorted.
func (r *Registry) Sockets() []string {
	var names []string
	for _, t := range r.types {
		for _, l := range t.Listeners {
			if l.Socket != "" {
				names = append(names, l.Socket)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Type returns the registered type called name.
func (r *Registry) Type(name string) (Type, bool) {
	t, ok := r.types[name]
	return t, ok
}
