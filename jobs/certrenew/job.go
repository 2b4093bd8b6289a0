package certrenew

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew/acmeflow"
	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/scheduler"
)

// TypeOption changes the job type NewType returns.
type TypeOption func(*typeConfig)

type typeConfig struct {
	dns acmeflow.DNS01Provider
}

// WithDNS01Provider makes the renewer solve DNS-01 with p instead of HTTP-01
// (the DNS-01 seam; see acmeflow.DNS01Provider).
func WithDNS01Provider(p acmeflow.DNS01Provider) TypeOption {
	return func(c *typeConfig) { c.dns = p }
}

// Type is the certrenew job type, for the scheduler's registry: HTTP-01
// through the shared challenge table.
func Type() scheduler.Type { return NewType() }

// NewType is Type with options (the DNS-01 seam).
func NewType(opts ...TypeOption) scheduler.Type {
	var tc typeConfig
	for _, o := range opts {
		o(&tc)
	}
	return scheduler.Type{
		Name:    "certrenew",
		Doc:     "keeps one current ACME certificate per custom domain (lego v5, ARI, one shared account, HTTP-01 answered by any instance)",
		Options: configs.OptionsOf(DefaultOptions),
		New: func(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
			return newJob(env, spec, tc)
		},
		Defaults:  configs.Defaults{Every: DefaultEvery, Jitter: DefaultJitter},
		Modes:     []configs.Mode{configs.ModeLeader},
		ModeWhy:   "one leader orders, its writes are fenced by its term's token",
		Listeners: []scheduler.Listener{challengeListener()},
	}
}

// The schedule of a certrenew entry that sets none: hourly, jittered.
const (
	DefaultEvery  = time.Hour
	DefaultJitter = 5 * time.Minute
)

// job is one configured certrenew job. It holds no state between runs: every
// pass starts from PostgreSQL.
type job struct {
	opts  Options
	keys  *keyring.Keyring
	roots *x509.CertPool
	pool  *pgxpool.Pool
	log   *slog.Logger
	m     *metrics
	dns   acmeflow.DNS01Provider
	// seen is the fingerprint (domainstore.Fingerprint) of what the last
	// pass on this instance loaded and left (nil before the first): only a
	// hint for Wake, never a reason to skip work.
	seen atomic.Pointer[string]
}

// Wake implements scheduler.Waker: between passes, every NewDomainCheck, the
// leader compares the wanted custom_domains with what its last pass loaded,
// and looks for retry requests (certs retry), and wakes for a pass at once
// when the domains differ or a request waits (a new domain gets its first
// certificate within about NewDomainCheck, not at the next interval). A
// domain the pass could not certify does not wake it again: the rows did not
// change.
func (j *job) Wake(ctx context.Context) <-chan struct{} {
	woke := make(chan struct{}, 1)
	if j.opts.NewDomainCheck <= 0 {
		return woke
	}
	go func() {
		t := time.NewTicker(j.opts.NewDomainCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			domains, requests, err := domainstore.Fingerprint(ctx, j.pool, j.opts.Statuses)
			fp := domains + "/" + requests
			if err != nil {
				if ctx.Err() == nil {
					j.log.DebugContext(ctx, "cannot look for new custom domains; trying again", "err", err)
				}
				continue
			}
			if last := j.seen.Load(); last == nil || *last != fp {
				j.log.InfoContext(ctx, "custom domains changed, or a retry was requested, since the last pass; running one now")
				woke <- struct{}{}
				return
			}
		}
	}()
	return woke
}

func newJob(env scheduler.Env, spec configs.Job, tc typeConfig) (scheduler.Job, error) {
	if spec.Schedule.Kind != configs.Interval {
		return nil, fmt.Errorf("certrenew %q: needs an interval schedule (every: 1h, jitter: 5m), not %s", spec.Name, spec.Schedule.Kind)
	}
	if env.Pool == nil {
		return nil, fmt.Errorf("certrenew %q: needs PostgreSQL", spec.Name)
	}
	opts, err := configs.DecodeOptions(spec, DefaultOptions)
	if err != nil {
		return nil, err
	}
	keys, err := opts.Keyring()
	if err != nil {
		return nil, fmt.Errorf("certrenew %q: %w", spec.Name, err)
	}
	roots, err := opts.CARoots()
	if err != nil {
		return nil, fmt.Errorf("certrenew %q: %w", spec.Name, err)
	}
	m, err := newMetrics(env.Metrics)
	if err != nil {
		return nil, fmt.Errorf("certrenew %q: metrics: %w", spec.Name, err)
	}
	log := env.Log // carries the job's name
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log.Info("certrenew configured", "directory", opts.Directory,
		"sealing_key", keys.KeyID(), "keys", len(keys.KeyIDs()), "concurrency", opts.Concurrency,
		"lock_delay", opts.LockDelay, "order_budget", opts.OrderBudget)
	return &job{opts: opts, keys: keys, roots: roots, pool: env.Pool, log: log, m: m, dns: tc.dns}, nil
}

// ErrNotSingleton is returned by Run for a run without a fencing token.
var ErrNotSingleton = errors.New("certrenew: the run has no fencing token; the job must be a singleton")

// Run is one pass: every wanted domain is checked, and ordered or renewed
// when due. Per-domain failures are recorded and logged, not returned: one
// bad domain never stops the others. Run returns an error when the pass
// itself could not be done (database, account), when a newer term has
// written (*fencing.StaleTokenError), or when ctx ended.
func (j *job) Run(ctx context.Context, r *scheduler.Run) error {
	if r.Token <= 0 {
		return ErrNotSingleton
	}
	return newPass(j, r).run(ctx)
}
