package kubelease

import (
	"sync/atomic"
	"time"

	"github.com/snip/snip-jobs/internal/notify"
	"github.com/snip/snip-jobs/leadership"
)

type stats struct {
	leasesGranted     atomic.Int64
	keepAlivesSent    atomic.Int64
	keepAliveFailures atomic.Int64
	reclaimed         atomic.Int64
	expired           atomic.Int64
	waiting           atomic.Int64
	leaseEnds         [5]atomic.Int64
	changed           notify.Notifier
}

func (st *stats) add(c *atomic.Int64, d int64) {
	c.Add(d)
	st.changed.Notify()
}

var reasonIndex = map[leadership.Reason]int{
	leadership.ReasonExpired: 0, leadership.ReasonLeaseLost: 1, leadership.ReasonKeyLost: 2,
	leadership.ReasonResigned: 3, leadership.ReasonShutdown: 4,
}

// Stats is a snapshot of the session's counters in leadership's terms:
// LeasesGranted counts incarnations of the instance Lease, KeepAlivesSent
// its renewals, Reclaimed the times this session took its instance Lease
// over from a gone predecessor. Lease stays 0 (there is no etcd lease).
func (s *Session) Stats() leadership.Stats {
	st := leadership.Stats{
		LeasesGranted:     s.stats.leasesGranted.Load(),
		KeepAlivesSent:    s.stats.keepAlivesSent.Load(),
		KeepAliveFailures: s.stats.keepAliveFailures.Load(),
		Reclaimed:         s.stats.reclaimed.Load(),
		Waiting:           s.stats.waiting.Load(),
		LeaseEnds:         map[leadership.Reason]int64{},
	}
	for r, i := range reasonIndex {
		st.LeaseEnds[r] = s.stats.leaseEnds[i].Load()
	}
	s.mu.Lock()
	l := s.cur
	s.mu.Unlock()
	if l != nil {
		if v := l.dl.Load(); v != deadlineDead {
			st.Headroom = max(0, time.Duration(v-s.now()))
		}
		st.LastRenewal = s.at(l.lastDeadline.Load() - int64(s.cfg.TTL-s.cfg.Margin))
	}
	return st
}

// Expired counts peers' instance Leases this session marked expired after
// seeing them unchanged for their duration (to take a job they held).
func (s *Session) Expired() int64 { return s.stats.expired.Load() }

// StatsChanged returns a channel closed at the next change of what Stats
// reports (not Headroom, which moves with the clock).
func (s *Session) StatsChanged() <-chan struct{} { return s.stats.changed.Wait() }
