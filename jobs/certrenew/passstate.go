package certrenew

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
)

// The state a pass's parts and workers share, each piece behind its own
// lock, so that no lock is held across a call to the CA or the database.

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

// domainStates is each domain's certificate state as the pass leaves it
// (State*), for the certificates gauge.
type domainStates struct {
	mu sync.Mutex
	m  map[string]string // name → State*
}

func (s *domainStates) set(name, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[name] = state
}

// settle gives every domain of ds not set yet its state at now.
func (s *domainStates) settle(ds []*domainstore.Domain, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ds {
		if _, ok := s.m[d.Name]; !ok {
			s.m[d.Name] = d.State(now)
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
