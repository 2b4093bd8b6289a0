package certrenew

import (
	"context"
	"errors"
	"sync"

	"github.com/snip/snip-jobs/fencing"
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
