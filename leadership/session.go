package leadership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/notify"
	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership/internal/deadline"
)

// ErrClosed is returned by Campaign and WaitReady once the session is closed.
var ErrClosed = errors.New("leadership: session closed")

// Session holds this process's etcd lease, keeps it alive, and hands out terms.
// When the lease is lost (deadline passed, or etcd says it is gone) every term on
// it ends, the lease is revoked best-effort, and the session starts over with a
// new lease; campaigns in progress continue on the new one.
type Session struct {
	cfg  Config
	log  *slog.Logger
	base time.Time // monotonic origin of every deadline

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu       sync.Mutex
	cur      *lease        // the live lease, nil while between leases
	changed  chan struct{} // closed and replaced whenever cur changes
	fatal    error         // set when the session cannot go on (duplicate instance)
	held     []clientv3.LeaseID
	busyJobs map[string]*busySlot // jobs with a campaign in progress or a live term

	stats stats

	// afterWinTxn, when set by a test in this package, runs between etcd's answer
	// to a winning campaign and the deadline check: a pause at the worst moment.
	afterWinTxn func()
	// onKeepAlive, when set by a test in this package, is called as each
	// keep-alive is sent: why, and the send time its answer would count from.
	onKeepAlive func(why sendReason, sentAt time.Time)
	// kaMember is the address of the member the newest keep-alive stream
	// reached (for tests in this package).
	kaMember atomic.Pointer[string]
}

// lease is one etcd lease of the session and the terms hanging on it.
type lease struct {
	id     clientv3.LeaseID
	ttl    time.Duration // as granted by etcd
	sentAt int64         // when the grant request was sent
	dl     *deadline.Deadline
	// lastDeadline is the deadline's last live value, kept after it dies so that
	// EndedAt can say when an expired term stopped being valid.
	lastDeadline atomic.Int64
	endNs        atomic.Int64    // session instant end was called (0: not called)
	ctx          context.Context // cancelled with an *EndedError when the lease ends
	cancel       context.CancelCauseFunc
	timer        *time.Timer // fires at the deadline
}

func (l *lease) end(now int64, cause *EndedError) {
	if l.dl.Kill() {
		l.endNs.CompareAndSwap(0, now)
	}
	l.cancel(cause)
}

type stats struct {
	leasesGranted     atomic.Int64
	keepAlivesSent    atomic.Int64
	keepAliveFailures atomic.Int64
	reclaimed         atomic.Int64
	waiting           atomic.Int64
	leaseEnds         [5]atomic.Int64 // by reasonIndex
	changed           notify.Notifier // every change of what Stats reports
}

// add adds d to the counter c and tells StatsChanged's waiters.
func (st *stats) add(c *atomic.Int64, d int64) {
	c.Add(d)
	st.changed.Notify()
}

var reasonIndex = map[Reason]int{ReasonExpired: 0, ReasonLeaseLost: 1, ReasonKeyLost: 2, ReasonResigned: 3, ReasonShutdown: 4}

// Stats is a snapshot of the session's counters, for metrics.
type Stats struct {
	Lease    clientv3.LeaseID // 0 while between leases
	Headroom time.Duration    // time left until the current lease's deadline; 0 without a lease
	// LastRenewal is the send time of the newest acknowledged keep-alive (or of
	// the grant) of the current lease; zero without a lease.
	LastRenewal       time.Time
	LeasesGranted     int64
	KeepAlivesSent    int64
	KeepAliveFailures int64
	// Reclaimed counts predecessors' leases revoked at start because their process was gone.
	Reclaimed int64
	// Waiting is the number of campaigns waiting for another holder to go.
	Waiting int64
	// LeaseEnds counts ended leases by reason.
	LeaseEnds map[Reason]int64
}

// NewSession validates cfg and starts the session in the background: it grants a
// lease, registers the instance, and keeps the lease alive until Close. It returns
// at once; WaitReady waits for the first lease.
func NewSession(cfg Config) (*Session, error) {
	s, err := newSession(cfg)
	if err != nil {
		return nil, err
	}
	go s.run()
	return s, nil
}

// newSession is NewSession without the start, for tests in this package that
// set hooks first.
func newSession(cfg Config) (*Session, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		cfg:      cfg,
		log:      cfg.Logger.With("instance", cfg.Instance),
		base:     time.Now(),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		changed:  make(chan struct{}),
		busyJobs: map[string]*busySlot{},
	}
	if !ridesOutElections(cfg.TTL, cfg.Margin, cfg.RenewInterval) {
		s.log.Warn("an etcd leader election can end this instance's terms: TTL − margin − renew interval is less than "+
			"twice etcd's default election timeout (docs/operations.md, \"The smallest safe TTL\")",
			"ttl", cfg.TTL, "margin", cfg.Margin, "renew_interval", cfg.RenewInterval, "election_allowance", ElectionAllowance)
	}
	return s, nil
}

// Instance is the configured instance name.
func (s *Session) Instance() string { return s.cfg.Instance }

// Config returns the session's configuration with defaults filled in.
func (s *Session) Config() Config { return s.cfg }

// now is the monotonic time since base, in nanoseconds.
func (s *Session) now() int64 { return int64(time.Since(s.base)) }

// at converts a session instant back to a time.Time (with monotonic reading).
func (s *Session) at(ns int64) time.Time { return s.base.Add(time.Duration(ns)) }

// WaitReady waits until the session holds a lease. It returns the fatal error if
// the session cannot start (another live process uses this instance name).
func (s *Session) WaitReady(ctx context.Context) error {
	_, err := s.waitLease(ctx)
	return err
}

// Done is closed when the session has stopped: after Close, or after a fatal error.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is the fatal error that stopped the session, ErrClosed after Close, or nil while running.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal != nil {
		return s.fatal
	}
	if s.ctx.Err() != nil {
		return ErrClosed
	}
	return nil
}

// Close ends every term (ReasonShutdown), revokes the lease so that successors win
// at once, and stops the session. It waits for the revoke until ctx is done.
func (s *Session) Close(ctx context.Context) error {
	s.cancel()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("leadership: close: %w", ctx.Err())
	}
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
		st.Lease = l.id
		if v := l.dl.Load(); v != deadline.Dead {
			st.Headroom = max(0, time.Duration(v-s.now()))
		}
		st.LastRenewal = s.at(l.lastDeadline.Load() - int64(l.ttl-s.cfg.Margin))
	}
	return st
}

// StatsChanged returns a channel closed at the next change of what Stats
// reports: a counter, the lease or its last renewal (not Headroom, which moves
// with the clock). Take the channel, read Stats, then wait on it: a status
// page or a test follows the session without polling.
func (s *Session) StatsChanged() <-chan struct{} { return s.stats.changed.Wait() }

// waitLease returns the live lease, waiting for one while between leases.
func (s *Session) waitLease(ctx context.Context) (*lease, error) {
	for {
		s.mu.Lock()
		l, changed, fatal := s.cur, s.changed, s.fatal
		s.mu.Unlock()
		switch {
		case fatal != nil:
			return nil, fatal
		case s.ctx.Err() != nil:
			return nil, ErrClosed
		case l != nil && l.ctx.Err() == nil:
			return l, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.done:
		}
	}
}

func (s *Session) setCurrent(l *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = l
	if l != nil {
		s.held = append(s.held, l.id)
	}
	close(s.changed)
	s.changed = make(chan struct{})
	s.stats.changed.Notify()
}

func (s *Session) heldBefore(id clientv3.LeaseID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.held {
		if h == id {
			return true
		}
	}
	return false
}

// run grants leases and keeps each alive until it is lost, until Close.
func (s *Session) run() {
	defer close(s.done)
	retry := s.cfg.RenewInterval / 8
	for s.ctx.Err() == nil {
		l, err := s.startLease()
		if err != nil {
			var dup *DuplicateInstanceError
			if errors.As(err, &dup) {
				s.log.Error("session stopped", "err", err)
				s.mu.Lock()
				s.fatal = err
				s.mu.Unlock()
				return
			}
			if s.ctx.Err() == nil {
				s.log.Warn("cannot start a lease; retrying", "err", err, "retry_in", retry)
			}
			sleep.For(s.ctx, retry)
			retry = min(2*retry, s.cfg.RenewInterval)
			continue
		}
		s.setCurrent(l)
		cause, renewed := s.keepAlive(l)
		if renewed {
			retry = s.cfg.RenewInterval / 8
		}
		l.end(s.now(), cause)
		l.timer.Stop()
		s.setCurrent(nil)
		s.stats.add(&s.stats.leaseEnds[reasonIndex[cause.Reason]], 1)
		level := slog.LevelWarn
		if cause.Reason == ReasonShutdown {
			level = slog.LevelInfo
		}
		s.log.Log(context.Background(), level, "lease ended", "lease", int64(l.id), "reason", cause.Reason, "detail", cause.Detail)
		switch cause.Reason {
		case ReasonLeaseLost:
			// Nothing to revoke.
		case ReasonShutdown:
			ctx, cancel := context.WithTimeout(context.Background(), l.ttl)
			s.revoke(ctx, l.id)
			cancel()
		default:
			go s.revokeUntilGone(l.id)
		}
	}
}

// startLease grants a lease and registers the instance on it.
func (s *Session) startLease() (*lease, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.TTL)
	defer cancel()
	sentAt := s.now()
	resp, err := s.cfg.Client.Grant(ctx, int64(s.cfg.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	s.stats.add(&s.stats.leasesGranted, 1)
	l := &lease{
		id:     resp.ID,
		ttl:    time.Duration(resp.TTL) * time.Second,
		sentAt: sentAt,
	}
	l.dl = deadline.New(sentAt, l.ttl, s.cfg.Margin)
	l.lastDeadline.Store(l.dl.Load())
	// Not derived from s.ctx: Close ends leases explicitly, with ReasonShutdown.
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	l.timer = time.AfterFunc(time.Duration(l.dl.Load()-s.now()), func() { s.checkDeadline(l) })
	if err := s.register(ctx, l); err != nil {
		l.end(s.now(), ended(ReasonShutdown, "registration failed"))
		l.timer.Stop()
		rctx, rcancel := context.WithTimeout(context.Background(), s.cfg.RenewInterval)
		s.revoke(rctx, l.id)
		rcancel()
		return nil, err
	}
	left := time.Duration(0) // a grant answered after its deadline: dead on arrival, ended at once
	if v := l.dl.Load(); v != deadline.Dead {
		left = time.Duration(v - s.now())
	}
	s.log.Info("lease granted", "lease", int64(l.id), "ttl", l.ttl, "deadline_in", left)
	return l, nil
}

// checkDeadline runs when the deadline timer fires: if no renewal moved the
// deadline meanwhile, the lease (and every term on it) ends now.
func (s *Session) checkDeadline(l *lease) {
	if now := s.now(); !l.dl.Valid(now) {
		l.end(now, ended(ReasonExpired, "no keep-alive acknowledged in time"))
	}
}

// revoke revokes a lease, deleting every key on it. Errors are logged: the lease
// expires on its own anyway.
func (s *Session) revoke(ctx context.Context, id clientv3.LeaseID) error {
	_, err := s.cfg.Client.Revoke(ctx, id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.log.Warn("revoke failed", "lease", int64(id), "err", err)
		return err
	}
	return nil
}

// revokeUntilGone keeps trying to revoke a lost lease until etcd confirms it is
// gone or the session closes. While etcd has no quorum, a lease is not expired and
// a new etcd leader extends every lease; revoking as soon as etcd is back lets a
// successor win without waiting a further TTL.
func (s *Session) revokeUntilGone(id clientv3.LeaseID) {
	for {
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.RenewInterval)
		err := s.revoke(ctx, id)
		cancel()
		if err == nil || s.ctx.Err() != nil {
			return
		}
		sleep.For(s.ctx, s.cfg.RenewInterval/2)
	}
}

// leaderKey is where the leader of job is recorded.
func (s *Session) leaderKey(job string) string { return LeaderKey(s.cfg.Prefix, job) }

// LeaderKey is the etcd key that records the leader of job under prefix.
func LeaderKey(prefix, job string) string {
	return prefixOrDefault(prefix) + "/leaders/" + job
}

// InstanceKey is the etcd key that registers instance under prefix.
func InstanceKey(prefix, instance string) string {
	return prefixOrDefault(prefix) + "/instances/" + instance
}

func prefixOrDefault(p string) string {
	if p == "" {
		return DefaultPrefix
	}
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}
