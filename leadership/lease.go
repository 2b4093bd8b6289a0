package leadership

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/snip/snip-jobs/leadership/internal/deadline"
)

// Lease is the session's side of one lease of its store: the deadline every
// term on it shares and the context that ends with it. A Store receives it in
// Open and reports through it: the grant (Start), each acknowledged renewal
// (Renewed), the end it learns of (End), and what Stats counts.
type Lease struct {
	s    *Session
	held Held // set once Open returns
	dl   *deadline.Deadline
	ttl  atomic.Int64 // as granted, nanoseconds
	// lastDeadline is the deadline's last live value, kept after it dies so that
	// EndedAt can say when an expired term stopped being valid.
	lastDeadline atomic.Int64
	endNs        atomic.Int64              // session instant End was first called (0: not called)
	renewals     atomic.Int64              // acknowledged renewals
	lastSent     atomic.Pointer[time.Time] // send time of the newest acknowledged renewal (or the grant), for Stats
	ctx          context.Context
	cancel       context.CancelCauseFunc
	timer        *time.Timer // fires at the deadline
}

func (s *Session) newLease() *Lease {
	// Not derived from the session's context: Close ends leases explicitly,
	// with ReasonShutdown.
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Lease{s: s, ctx: ctx, cancel: cancel}
}

// Now is the session's clock now, for a store to read just before it sends a
// request that creates or renews the lease (Start, Renewed).
func (l *Lease) Now() Instant { return Instant{ns: l.s.clock.now(), at: time.Now()} }

// Start sets the lease's first deadline: sent (when the request that
// created the lease was sent: the lease cannot have started earlier at the
// server) + ttl (as granted) − the margin. Open calls it once.
func (l *Lease) Start(sent Instant, ttl time.Duration) {
	s := l.s
	l.ttl.Store(int64(ttl))
	l.dl = deadline.New(sent.ns, ttl, s.cfg.Margin)
	l.lastSent.Store(&sent.at)
	l.lastDeadline.Store(l.dl.Load())
	l.timer = time.AfterFunc(time.Duration(l.dl.Load()-s.clock.now()), l.CheckDeadline)
	s.stats.add(&s.stats.leasesGranted, 1)
}

// Renewed applies a renewal sent at sent and acknowledged with ttl: the
// deadline moves to sent + ttl − margin. It reports false, and ends the
// lease (ReasonExpired), when the acknowledgement came after the deadline had
// passed: a late answer never revives the lease's terms.
func (l *Lease) Renewed(sent Instant, ttl time.Duration) bool {
	s := l.s
	now := s.clock.now()
	nd, ok := l.dl.Renew(sent.ns, ttl, s.cfg.Margin, now)
	if !ok {
		l.End(Ended(ReasonExpired, "renewal acknowledged after the deadline"))
		return false
	}
	l.ttl.Store(int64(ttl))
	l.renewals.Add(1)
	l.lastDeadline.Store(nd)
	l.lastSent.Store(&sent.at)
	l.timer.Reset(time.Duration(nd - now))
	s.stats.changed.Notify() // LastRenewal
	return true
}

// End ends the lease, and every term on it, with cause (the first cause wins).
func (l *Lease) End(cause *EndedError) {
	cause = l.seenLate(cause)
	if l.dl == nil || l.dl.Kill() {
		l.endNs.CompareAndSwap(0, l.s.clock.now())
	}
	l.cancel(cause)
}

// seenLate turns the store's news of a loss (lease or record gone) that
// arrives after the lease's deadline into what it is, the expiry seen late:
// resuming from a pause, the store's answer can beat the deadline's timer.
func (l *Lease) seenLate(cause *EndedError) *EndedError {
	if cause.Reason != ReasonLeaseLost && cause.Reason != ReasonKeyLost || l.dl == nil {
		return cause
	}
	if l.s.clock.now() < l.lastDeadline.Load() {
		return cause
	}
	return Ended(ReasonExpired, "no renewal acknowledged in time; then %s", cause.Detail)
}

// CheckDeadline ends the lease (ReasonExpired) if its deadline has passed
// without a renewal. The deadline's timer calls it; a store's loop may too,
// when it finds the deadline already dead.
func (l *Lease) CheckDeadline() {
	if now := l.s.clock.now(); !l.dl.Valid(now) {
		l.End(Ended(ReasonExpired, "no renewal acknowledged in time"))
	}
}

// Context ends when the lease does; context.Cause gives an *EndedError.
func (l *Lease) Context() context.Context { return l.ctx }

// Valid reports that the lease has not ended and its deadline is ahead.
func (l *Lease) Valid() bool { return l.ctx.Err() == nil && l.dl.Valid(l.s.clock.now()) }

// Deadline is the lease's deadline, or the zero Time once it has passed.
func (l *Lease) Deadline() time.Time {
	v := l.dl.Load()
	if v == deadline.Dead {
		return time.Time{}
	}
	return l.s.clock.at(v)
}

// HeldBefore reports whether this session has held a lease its store named
// id (this one included): a record left on it is this process's own.
func (l *Lease) HeldBefore(id string) bool {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.past[id]
}

// Own records id, as its store names leases, as this session's before the
// store writes anything under it: a write whose answer was lost may have
// landed, and a record found on id later is then this session's own, not
// another live process's (HeldBefore reports it).
func (l *Lease) Own(id string) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.past[id] = true
}

// Sent and Failed count a renewal sent and one that failed; Reclaimed a dead
// predecessor's lease ended at start (see Stats).
func (l *Lease) Sent()      { l.s.stats.add(&l.s.stats.keepAlivesSent, 1) }
func (l *Lease) Failed()    { l.s.stats.add(&l.s.stats.keepAliveFailures, 1) }
func (l *Lease) Reclaimed() { l.s.stats.add(&l.s.stats.reclaimed, 1) }

// Waiting counts a campaign waiting for another holder to go, until done is called.
func (l *Lease) Waiting() (done func()) {
	st := &l.s.stats
	st.add(&st.waiting, 1)
	return func() { st.add(&st.waiting, -1) }
}

// stop ends the lease with cause and stops its deadline's timer.
func (l *Lease) stop(cause *EndedError) {
	l.End(cause)
	if l.timer != nil {
		l.timer.Stop()
	}
}
