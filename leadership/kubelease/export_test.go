package kubelease

import "context"

// SetAfterWin sets the hook run between a winning write's answer and the
// deadline check (before the session campaigns).
func SetAfterWin(s *Session, f func()) { s.afterWin = f }

// WaitHeldSeen waits until s's observer has seen the job's Lease held, so
// that a campaign starting next judges it held rather than racing a write
// it has not seen yet.
func WaitHeldSeen(ctx context.Context, s *Session, job string) error {
	for {
		jl, changed := s.obs.lease(s.cfg.jobLease(job))
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
