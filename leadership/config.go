package leadership

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/snip/snip-jobs/leadership/internal/deadline"
)

// DefaultTTL is Config's default lease TTL. A 10 s lease with a 3 s margin
// lets a leader act until 7 s after the send time of its newest acknowledged
// renewal; renewals go out every TTL/3, so two can be lost before the
// deadline passes.
const DefaultTTL = 10 * time.Second

// Rules are a backend's rules for a lease's timing, which CheckTiming and
// TimingDefaults apply: each backend states its own (in its layout package,
// which a config's checks read without linking the backend's client).
type Rules struct {
	// Backend names the backend in messages ("etcd", "the Kubernetes backend").
	Backend string
	// MinTTL is the shortest lease TTL the backend honours.
	MinTTL time.Duration
	// WholeSeconds: the backend grants leases in whole seconds.
	WholeSeconds bool
	// ElectionAllowance is how long the backend's store may leave renewals
	// unanswered while it elects a leader of its own (0: nothing to allow
	// for). A lease rides out such an election when TTL − margin − renew
	// interval is at least this (docs/operations.md, "The smallest safe TTL").
	ElectionAllowance time.Duration
}

// Config is what every backend's session needs besides its store: who this
// process is and the lease's timing. Zero fields take the defaults noted on
// each.
type Config struct {
	// Instance names this process among its peers (e.g. the server's name). Required.
	Instance string
	// Host is the machine's name, used to tell a restarted process of this
	// instance (same host, predecessor dead: its lease is reclaimed at once)
	// from a second live process or another server using the same name
	// (startup fails). Default os.Hostname().
	Host string
	// TTL of the lease, at least Rules.MinTTL, whole seconds if the rules
	// say so (default 10 s).
	TTL time.Duration
	// Margin is how long before the lease could expire the session stops
	// treating its terms as valid (default 3/10 of TTL: 3 s of 10 s). 0 < Margin < TTL.
	Margin time.Duration
	// RenewInterval is the time between renewals (default TTL/3, or less
	// when needed and possible for the store's own election to fit: see
	// TimingDefaults). It must leave room for at least two renewals before
	// the deadline: 2×RenewInterval < TTL − Margin.
	RenewInterval time.Duration
	// Logger receives the session's logs; every line about a term carries job,
	// instance and token. Default: discard.
	Logger *slog.Logger
	// Clock is the clock of every deadline, the session's and the store's
	// (default BootClock). Tests may inject one.
	Clock Clock
	// Rules are the backend's timing rules; the backend sets them.
	Rules Rules
}

// WithDefaults returns a copy of c with defaults filled in, and every
// problem found reported at once. A backend's NewSession calls it, adding
// its own checks of the names.
func (c Config) WithDefaults() (Config, error) {
	var errs []error
	if c.Instance == "" {
		errs = append(errs, errors.New("leadership: Instance is required (a name unique among the servers, e.g. the host name)"))
	} else if err := CheckName("instance", c.Instance); err != nil {
		errs = append(errs, err)
	}
	if c.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			errs = append(errs, fmt.Errorf("leadership: Host not set and the host name is unknown: %w", err))
		}
		c.Host = h
	}
	c.TTL, c.Margin, c.RenewInterval = TimingDefaults(c.Rules, c.TTL, c.Margin, c.RenewInterval)
	if err := CheckTiming(c.Rules, c.TTL, c.Margin, c.RenewInterval); err != nil {
		errs = append(errs, err)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = BootClock{}
	}
	return c, errors.Join(errs...)
}

// TimingDefaults fills zero TTL (10 s), margin (3/10 of TTL) and renew interval.
// The renew interval is TTL/3, shortened when that leaves the store's own
// election less than r.ElectionAllowance before the deadline and an interval
// of at least TTL/10 makes it fit (and is valid): on etcd at TTL 4 s, 600 ms
// instead of 1.33 s. Below about 4 s (at the default margin) no interval
// makes etcd's fit.
func TimingDefaults(r Rules, ttl, margin, renew time.Duration) (time.Duration, time.Duration, time.Duration) {
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if margin == 0 {
		margin = ttl * 3 / 10
	}
	if renew == 0 {
		renew = ttl / 3
		if fit := ttl - margin - r.ElectionAllowance; r.ElectionAllowance > 0 && fit >= ttl/10 && fit < renew && 2*fit < ttl-margin {
			renew = fit
		}
	}
	return ttl, margin, renew
}

// RidesOutElections reports whether the store's own leader election
// (r.ElectionAllowance) fits between the last renewal acknowledged before it
// and the deadline.
func RidesOutElections(r Rules, ttl, margin, renew time.Duration) bool {
	return ttl-margin-renew >= r.ElectionAllowance
}

// CheckTiming reports every problem with a lease TTL, stop-early margin and
// renew interval (after TimingDefaults) under the backend's rules r, in words
// an operator can act on.
func CheckTiming(r Rules, ttl, margin, renew time.Duration) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case ttl < r.MinTTL:
		bad("leadership: TTL %v is below %s's minimum lease TTL %v", ttl, r.Backend, r.MinTTL)
	case r.WholeSeconds && ttl%time.Second != 0:
		bad("leadership: TTL %v is not a whole number of seconds (%s grants leases in whole seconds)", ttl, r.Backend)
	}
	for _, msg := range deadline.CheckRoom(ttl, margin, renew, "keep-alives") {
		bad("leadership: %s", msg)
	}
	return errors.Join(errs...)
}

// CheckName rejects job and instance names that would read badly in logs or
// break a store's layout: empty, or with '/', spaces or control characters.
// A backend may refuse more (Kubernetes names a Lease after them).
func CheckName(what, name string) error {
	if name == "" {
		return fmt.Errorf("leadership: empty %s name", what)
	}
	for _, r := range name {
		if r == '/' || r <= ' ' || r == 0x7f {
			return fmt.Errorf("leadership: %s name %q: use letters, digits, '-', '_' or '.' (no '/', spaces or control characters)", what, name)
		}
	}
	return nil
}
