package kubelease

import (
	"context"

	"github.com/snip/snip-jobs/leadership"
)

// Store is a session's Lease store, for tests that reach into it.
type Store = store

// NewTestSession is NewSession, with its store.
func NewTestSession(cfg Config) (*leadership.Session, *Store, error) {
	st, err := newStore(cfg)
	if err != nil {
		return nil, nil, err
	}
	s, err := leadership.NewSession(st)
	return s, st, err
}

// SetAfterWin sets the hook run between a winning write's answer and the
// deadline check (before the session campaigns).
func (st *store) SetAfterWin(f func()) { st.afterWin = f }

// Expired counts peers' instance Leases the store marked expired after
// seeing them unchanged for their duration (to take a job they held).
func (st *store) Expired() int64 { return st.expired.Load() }

// WaitHeldSeen waits until the store's observer has seen the job's Lease
// held, so that a campaign starting next judges it held rather than racing
// a write it has not seen yet.
func (st *store) WaitHeldSeen(ctx context.Context, job string) error {
	for {
		jl, changed := st.obs.lease(st.cfg.jobLease(job))
		if holderOf(jl) != "" {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
