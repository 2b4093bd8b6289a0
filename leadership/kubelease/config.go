package kubelease

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease/layout"
)

// Defaults for Config.
const (
	DefaultNamespace = "default"
	DefaultPrefix    = layout.DefaultPrefix
)

// Config configures a session on Kubernetes Leases. Zero fields take the
// defaults noted on each.
type Config struct {
	// Client talks to the API server. Required. It needs get, list, watch,
	// create, update and delete on coordination.k8s.io Leases in Namespace.
	// Only the coordination/v1 client (a clientset's CoordinationV1()): a
	// binary that builds no whole clientset is some 14 MB smaller. It must
	// not be rate-limited on the client side (build it from a rest.Config
	// with QPS -1): the instance Lease's renewals share it with every
	// campaign's writes, and a renewal queued behind 100 of them at
	// client-go's default 5 requests/s outlives the deadline and ends every
	// term. The API server's own priority and fairness still applies.
	Client coordclient.CoordinationV1Interface
	// Namespace holds the Leases (default "default").
	Namespace string
	// Prefix starts every Lease's name and is the value of the
	// jobs.snip.dev/set label, so that several deployments can share a
	// namespace (default "snip-jobs").
	Prefix string
	// Config is the instance's name and the timing. The TTL is the instance
	// Lease's duration (leaseDurationSeconds): how long a peer must see it
	// unchanged before it judges this instance gone. The margin absorbs the
	// difference in rate between this host's clock (Config.Clock) and a
	// peer's over one TTL. With Prefix, the instance's name must make a valid Lease
	// name (lower-case letters, digits, '-', '.').
	leadership.Config
}

// NewSession validates cfg and starts a session on Kubernetes Leases in the
// background: it takes the instance Lease and renews it until Close.
// WaitReady waits for it.
func NewSession(cfg Config) (*leadership.Session, error) { return leadership.Start(newStore(cfg)) }

// newStore validates cfg, reporting every problem at once, and makes the
// store a session runs on; its observer starts with the session's first lease.
func newStore(cfg Config) (*store, error) {
	cfg.Config.Rules = layout.Rules
	c, err := cfg.Config.WithDefaults()
	errs := []error{err}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if cfg.Client == nil {
		bad("kubelease: Client is required")
	} else if rl := cfg.Client.RESTClient().GetRateLimiter(); rl != nil {
		bad("kubelease: the client is rate-limited to %g requests/s: the instance Lease's renewals would queue behind "+
			"campaigns and miss their deadline; build it from a rest.Config with QPS: -1", rl.QPS())
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if c.Instance != "" {
		errs = append(errs, layout.CheckInstance(cfg.Prefix, c.Instance))
	}
	errs = append(errs, layout.CheckNamespace(cfg.Namespace), layout.CheckPrefix(cfg.Prefix))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.Config = c
	st := &store{cfg: cfg, log: c.Logger.With("instance", c.Instance), base: c.Clock.Now(), leases: cfg.Client.Leases(cfg.Namespace)}
	st.obs = newObserver(st)
	return st, nil
}

// store is the Kubernetes backend's leadership.Store: the set's Leases in
// one namespace, followed by one observer.
type store struct {
	cfg    Config
	log    *slog.Logger
	base   time.Duration // the origin of the observer's instants, on the session's Clock
	leases coordclient.LeaseInterface
	obs    *observer
	// obsOnce starts the observer with the session's first lease, on the
	// session's context.
	obsOnce sync.Once

	// expired counts peers' instance Leases this store marked expired after
	// seeing them unchanged for their duration (to take a job they held).
	expired atomic.Int64
	// afterWin, when set by a test, runs between the API server's answer to
	// a winning write and the session's deadline check: a pause at the
	// worst moment.
	afterWin func()
}

var _ leadership.Store = (*store)(nil)

func (st *store) Config() leadership.Config { return st.cfg.Config }

// now is the session's clock (Config.Clock), in nanoseconds since base.
func (st *store) now() int64 { return int64(st.cfg.Clock.Now() - st.base) }

// CheckJob reports a job name that cannot name a Lease or be a label value.
func (st *store) CheckJob(job string) error { return layout.CheckJob(st.cfg.Prefix, job) }

// The Lease layout (see the package comment).
const (
	labelRole     = "jobs.snip.dev/role" // "instance" or "job"
	labelSet      = layout.LabelSet      // Prefix
	labelName     = "jobs.snip.dev/name" // the instance's or the job's name
	annToken      = "jobs.snip.dev/token"
	annInstance   = "jobs.snip.dev/instance-lease"
	annLeaving    = "jobs.snip.dev/leaving"
	annExpiredBy  = "jobs.snip.dev/expired-by"
	annResign     = "jobs.snip.dev/resign-token"
	annTakenOver  = "jobs.snip.dev/taken-over-token" // on a job Lease: its last taken-over term (Cluster.TakeOver)
	annTakenBy    = "jobs.snip.dev/taken-over-by"    // ditto: who took it
	annHost       = "jobs.snip.dev/host"             // on an instance Lease: the process, for people and death reclaim
	annPID        = "jobs.snip.dev/pid"              // ditto
	annProcStart  = "jobs.snip.dev/proc-start"       // ditto: its start time (ticks since boot)
	annPIDNS      = "jobs.snip.dev/pid-ns"           // ditto: its PID namespace
	annStarted    = "jobs.snip.dev/started"          // ditto: when it started (RFC 3339), for people
	roleInstance  = "instance"
	roleJob       = "job"
	leavingMarker = "true"
)

func (c Config) instanceLease(instance string) string {
	return layout.InstanceLease(c.Prefix, instance)
}
func (c Config) jobLease(job string) string { return layout.JobLease(c.Prefix, job) }

func (c Config) selector(role string) string {
	return labelRole + "=" + role + "," + c.setSelector()
}

// setSelector selects every Lease of the set, instance and job Leases.
func (c Config) setSelector() string { return layout.SetSelector(c.Prefix) }
