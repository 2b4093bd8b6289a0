package leadership

import (
	"sync/atomic"
	"time"

	"github.com/snip/snip-jobs/internal/notify"
	"github.com/snip/snip-jobs/leadership/internal/deadline"
)

// Stats is a snapshot of a session's counters, for metrics and status.
type Stats struct {
	// Lease names the current lease as its store does (Held.ID); "" while
	// between leases.
	Lease string
	// Headroom is the time left until the current lease's deadline; 0 without a lease.
	Headroom time.Duration
	// LastRenewal is the send time of the newest acknowledged renewal (or of
	// the grant) of the current lease; zero without a lease.
	LastRenewal       time.Time
	LeasesGranted     int64
	KeepAlivesSent    int64
	KeepAliveFailures int64
	// Reclaimed counts the leases of dead predecessor processes (of this
	// instance, on this host) that this session ended at start.
	Reclaimed int64
	// Waiting is the number of campaigns waiting for another holder to go.
	Waiting int64
	// LeaseEnds counts ended leases by reason.
	LeaseEnds map[Reason]int64
}

type stats struct {
	leasesGranted     atomic.Int64
	keepAlivesSent    atomic.Int64
	keepAliveFailures atomic.Int64
	reclaimed         atomic.Int64
	waiting           atomic.Int64
	leaseEnds         [6]atomic.Int64 // by reasonIndex
	changed           notify.Notifier // every change of what Stats reports
}

var reasonIndex = map[Reason]int{ReasonExpired: 0, ReasonLeaseLost: 1, ReasonKeyLost: 2, ReasonResigned: 3, ReasonShutdown: 4, ReasonTakenOver: 5}

// add adds d to the counter c and tells StatsChanged's waiters.
func (st *stats) add(c *atomic.Int64, d int64) {
	c.Add(d)
	st.changed.Notify()
}

// Stats returns a snapshot of the session's counters.
func (s *Session) Stats() Stats {
	st := Stats{
		LeasesGranted:     s.stats.leasesGranted.Load(),
		KeepAlivesSent:    s.stats.keepAlivesSent.Load(),
		KeepAliveFailures: s.stats.keepAliveFailures.Load(),
		Reclaimed:         s.stats.reclaimed.Load(),
		Waiting:           s.stats.waiting.Load(),
		LeaseEnds:         map[Reason]int64{},
	}
	for r, i := range reasonIndex {
		st.LeaseEnds[r] = s.stats.leaseEnds[i].Load()
	}
	s.mu.Lock()
	l := s.cur
	s.mu.Unlock()
	if l != nil {
		st.Lease = l.held.ID()
		if v := l.dl.Load(); v != deadline.Dead {
			st.Headroom = max(0, time.Duration(v-s.clock.now()))
		}
		if at := l.lastSent.Load(); at != nil {
			st.LastRenewal = *at
		}
	}
	return st
}

// StatsChanged returns a channel closed at the next change of what Stats
// reports: a counter, the lease or its last renewal (not Headroom, which moves
// with the clock). Take the channel, read Stats, then wait on it: a status
// page or a test follows the session without polling.
func (s *Session) StatsChanged() <-chan struct{} { return s.stats.changed.Wait() }
