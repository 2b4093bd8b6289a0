package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
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

// JobFunc adapts a function to Job.
type JobFunc func(ctx context.Context, r *Run) error

// Run calls f.
func (f JobFunc) Run(ctx context.Context, r *Run) error { return f(ctx, r) }

// Type is a kind of job, registered under the name the config's `type:` uses.
type Type struct {
	Name string
	// Doc is one line saying what the job does.
	Doc string
	// Options returns a pointer to a fresh options value with its defaults set,
	// into which the config's `options:` is decoded; nil if the type has none.
	// If the value has a Validate() error method, the config loader calls it.
	Options func() any
	// New builds the job from its config entry (Options decoded and valid).
	New func(env Env, spec configs.Job) (Job, error)
	// Defaults fill in what the type's config entries leave out (a
	// schedule, catch-up settings).
	Defaults configs.Defaults
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
		if _, dup := r.types[t.Name]; dup {
			return nil, fmt.Errorf("scheduler: job type %q registered twice", t.Name)
		}
		r.types[t.Name] = t
	}
	return r, nil
}

// Options implements configs.Types.
func (r *Registry) Options(name string) (any, bool) {
	t, ok := r.types[name]
	if !ok {
		return nil, false
	}
	if t.Options == nil {
		return nil, true
	}
	return t.Options(), true
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

// Type returns the registered type called name.
func (r *Registry) Type(name string) (Type, bool) {
	t, ok := r.types[name]
	return t, ok
}

// Validator is implemented by options that check themselves.
type Validator interface{ Validate() error }

// Options returns a job's options as T: what the config decoded (a *T), or
// defaults when the entry had none; then, if *T has a Validate method, the
// result of it. Job types call it from New. Errors name the job's type and name.
func Options[T any](spec configs.Job, defaults T) (T, error) {
	opts := defaults
	switch o := spec.Options.(type) {
	case nil:
	case *T:
		opts = *o
	default:
		return opts, fmt.Errorf("%s %q: options are a %T, not %T", spec.Type, spec.Name, spec.Options, &defaults)
	}
	if v, ok := any(&opts).(Validator); ok {
		if err := v.Validate(); err != nil {
			return opts, fmt.Errorf("%s %q: options: %w", spec.Type, spec.Name, err)
		}
	}
	return opts, nil
}
