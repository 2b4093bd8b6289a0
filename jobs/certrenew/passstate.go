package certrenew

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/snip/snip-jobs/fencing"
)

// The state a pass's parts and workers share. The clock is set once, before
// any worker starts; every other piece is behind its own lock, so that no
// lock is held across a call to the CA or the database.

// dbClock is the database's clock, advanced by our monotonic clock since the
// pass loaded its state: instants from PostgreSQL and from the CA are
// compared with it, never with this host's wall clock.
type dbClock struct {
	at     time.Time // the database's clock when the pass loaded its state
	loaded time.Time // our clock (monotonic) at the same moment
}

// set starts the clock at the database's instant at, read just now.
func (c *dbClock) set(at time.Time) { c.at, c.loaded = at, time.Now() }

func (c *dbClock) now() time.Time { return c.at.Add(time.Since(c.loaded)) }

// stopper ends the pass at the first sign that a newer term has written (a
// stale token): nothing more the pass does can stick, so everything else in
// it is cancelled and the pass returns that error. Safe for concurrent use.
type stopper struct {
	cancel context.CancelCauseFunc
	once   sync.Once
	err    error // the first error that ended the pass; read once its goroutines are done
}

// checkStale ends the pass if err says a newer term has written.
func (s *stopper) checkStale(err error) {
	if errors.Is(err, fencing.ErrStaleToken) {
		s.once.Do(func() {
			s.err = err
			s.cancel(err)
		})
	}
}

// caPause is until when the pass asks the CA nothing (a rate limit, an
// outage), on this host's monotonic clock, and why.
type caPause struct {
	mu     sync.Mutex
	until  time.Time // zero: not paused
	reason string
}

// left is how long the pause lasts from now (0: not paused), and why.
func (c *caPause) left() (time.Duration, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until.IsZero() {
		return 0, ""
	}
	return max(time.Until(c.until), 0), c.reason
}

// extend pauses until until, unless a pause already lasts longer; it
// reports whether the pause was extended.
func (c *caPause) extend(until time.Time, reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !until.After(c.until) {
		return false
	}
	c.until, c.reason = until, reason
	return true
}

// budgetLatch remembers that the order budget was found spent: the pass
// places no more orders (the budget only frees as old orders age out of the
// window, far later than a pass lasts).
type budgetLatch struct {
	mu  sync.Mutex
	out bool
}

func (b *budgetLatch) spent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out
}

// markSpent latches the budget as spent and reports whether it was the first
// to (the one to log it).
func (b *budgetLatch) markSpent() (first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	first, b.out = !b.out, true
	return first
}

// domainStates is each domain's certificate state as the pass leaves it
// (State*), for the certificates gauge.
type domainStates struct {
	mu sync.Mutex
	m  map[string]string // name → State*
}

func (s *domainStates) set(name, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]string{}
	}
	s.m[name] = state
}

// setUnset gives every name not set yet the state of(name).
func (s *domainStates) setUnset(names []string, of func(i int) string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]string{}
	}
	for i, name := range names {
		if _, ok := s.m[name]; !ok {
			s.m[name] = of(i)
		}
	}
}

// counts is the number of domains in each state.
func (s *domainStates) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[string]int{}
	for _, st := range s.m {
		n[st]++
	}
	return n
}
