package kubelease

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/internal/deadline"
	"github.com/snip/snip-jobs/leadership/kubelease/layout"
)

// Defaults for Config.
const (
	DefaultNamespace = "default"
	DefaultPrefix    = layout.DefaultPrefix
	DefaultTTL       = 10 * time.Second
)

// Config configures a Session. Zero fields take the defaults noted on each.
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
	// Instance names this process among its peers. Required. With Prefix it
	// must make a valid Lease name (lower-case letters, digits, '-', '.').
	Instance string
	// Host is the machine's name, for people (default os.Hostname()).
	Host string
	// TTL is the instance Lease's duration (leaseDurationSeconds): how long
	// a peer must see it unchanged before it judges this instance gone.
	// Whole seconds, at least 1 s (default 10 s).
	TTL time.Duration
	// Margin: how long before a peer could judge this instance gone the
	// session stops treating its terms as valid (default 3/10 of TTL). It
	// absorbs the difference in rate between this host's monotonic clock
	// and a peer's over one TTL.
	Margin time.Duration
	// RenewInterval is the time between renewals of the instance Lease
	// (default TTL/3). 2×RenewInterval < TTL − Margin.
	RenewInterval time.Duration
	// Logger receives the session's logs (default: discard).
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Client == nil {
		bad("kubelease: Client is required")
	} else if rl := c.Client.RESTClient().GetRateLimiter(); rl != nil {
		bad("kubelease: the client is rate-limited to %g requests/s: the instance Lease's renewals would queue behind "+
			"campaigns and miss their deadline; build it from a rest.Config with QPS: -1", rl.QPS())
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Instance == "" {
		bad("kubelease: Instance is required (a name unique among the servers, e.g. the host name)")
	} else if err := layout.CheckInstance(c.Prefix, c.Instance); err != nil {
		errs = append(errs, err)
	}
	if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		bad("kubelease: namespace %q: %v", c.Namespace, msgs)
	}
	if msgs := validation.IsValidLabelValue(c.Prefix); len(msgs) > 0 {
		bad("kubelease: prefix %q is the value of a label: %v", c.Prefix, msgs)
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Margin == 0 {
		c.Margin = c.TTL * 3 / 10
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.TTL / 3
	}
	if c.TTL < time.Second || c.TTL%time.Second != 0 {
		bad("kubelease: TTL %v must be a whole number of seconds, at least 1 s (leaseDurationSeconds)", c.TTL)
	}
	for _, msg := range deadline.CheckRoom(c.TTL, c.Margin, c.RenewInterval, "renewals") {
		bad("kubelease: %s", msg)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, errors.Join(errs...)
}

// The Lease layout (see the package comment).
const (
	labelRole     = "jobs.snip.dev/role" // "instance" or "job"
	labelSet      = "jobs.snip.dev/set"  // Prefix
	labelName     = "jobs.snip.dev/name" // the instance's or the job's name
	annToken      = "jobs.snip.dev/token"
	annInstance   = "jobs.snip.dev/instance-lease"
	annLeaving    = "jobs.snip.dev/leaving"
	annExpiredBy  = "jobs.snip.dev/expired-by"
	annResign     = "jobs.snip.dev/resign-token"
	annHost       = "jobs.snip.dev/host" // on an instance Lease, for people
	annPID        = "jobs.snip.dev/pid"  // on an instance Lease, for people
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
func (c Config) setSelector() string { return labelSet + "=" + c.Prefix }

// leadershipConfig is the timing and naming the scheduler reads.
func (c Config) leadershipConfig() leadership.Config {
	return leadership.Config{
		Prefix: c.Prefix, Instance: c.Instance, Host: c.Host,
		TTL: c.TTL, Margin: c.Margin, RenewInterval: c.RenewInterval, Logger: c.Logger,
	}
}
