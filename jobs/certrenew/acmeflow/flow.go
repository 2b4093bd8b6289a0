package acmeflow

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
)

// Config is what one pass's Flow works with.
type Config struct {
	domainstore.Config                    // the pass's: its run, pool (the account's row), keys, clock, policy
	Store              *domainstore.Store // made with it
	Gate               Gate
	Stale              func(error) // told every error of a fenced write: a stale token ends the pass
	Counters           *Counters

	Directory, Email, Profile string // the CA's directory URL, the account's contact, the profile ordered
	Roots                     *x509.CertPool
	DNS                       DNS01Provider // nil: HTTP-01 through the shared table
	Concurrency               int           // workers (the transport's idle connections)
	OrderTimeout              time.Duration // lego's wait for a finalized order
	UnavailablePause          time.Duration // after a 503 without Retry-After
}

// Gate holds a pass's orders back while an earlier term may still be
// talking to the CA (the job's lock-delay).
type Gate interface {
	// BeforeOrder returns once an order may be placed; delayed reports
	// whether the pass had an earlier term's lock-delay to wait out.
	BeforeOrder(ctx context.Context) (delayed bool, err error)
}

// Counters are the job's counters the flow adds to, labelled by job (and
// result, reason).
type Counters struct {
	Orders, Failures                     *prometheus.CounterVec
	RateLimitWaits, RateLimitWaitSeconds *prometheus.CounterVec
	AlreadyReplaced, Recovered           *prometheus.CounterVec
}

// Flow is one pass's way to the CA: the pause a CA failure imposed, and
// the Orderer on a session logged in with the shared account.
type Flow struct {
	c        Config
	throttle *caThrottle
	account  *accountStore
}

// New returns the flow of one pass.
func New(c Config) *Flow {
	t := &caThrottle{r: c.Run, log: c.Log, m: c.Counters, unavailablePause: c.UnavailablePause, stale: c.Stale}
	return &Flow{c: c, throttle: t, account: &accountStore{pool: c.Pool, keys: c.Keys, r: c.Run, log: c.Log,
		dir: c.Directory, email: c.Email, throttle: t}}
}

// Paused is how long the renewer stays paused from now (0: not paused),
// and why.
func (f *Flow) Paused() (time.Duration, string) { return f.throttle.left() }

// Restore carries over the pause an earlier pass recorded, until until on
// our clock.
func (f *Flow) Restore(until time.Time, reason string) { f.throttle.restore(until, reason) }

// Connect loads (or creates and registers) the shared account and opens
// the pass's session with the CA, bound to term; Close the Orderer.
func (f *Flow) Connect(term context.Context) (*Orderer, error) {
	acct, err := f.account.load(term)
	if err != nil {
		return nil, err
	}
	ca, err := dialCA(term, acct, &f.c)
	if err != nil {
		f.throttle.failed(term, classify(err, &observation{}), "")
		return nil, fmt.Errorf("connect to %s: %w", f.c.Directory, err)
	}
	if err := f.account.register(term, ca.client, acct); err != nil {
		ca.close()
		return nil, err
	}
	if err := ca.answerWith(f.c.DNS, f.c.Run); err != nil {
		return nil, err
	}
	return &Orderer{ca: ca, store: f.c.Store, gate: f.c.Gate, throttle: f.throttle, stale: f.c.Stale, clock: f.c.Clock,
		opts: &f.c, m: f.c.Counters, job: f.c.Run.Job, log: f.c.Log}, nil
}

// Close lets go of the session's idle connections.
func (o *Orderer) Close() { o.ca.close() }
