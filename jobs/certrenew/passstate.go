package certrenew

import (
	"sync"
	"time"
)

// The state a pass's workers share, each piece behind its own lock so that
// no lock is held across a call to the CA or the database.

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
