package leadership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
)

// ErrClosed is returned by Campaign and WaitReady once the session is closed.
var ErrClosed = errors.New("leadership: session closed")

// Session holds this process's lease in its store, keeps it alive, and hands
// out terms. When the lease is lost (deadline passed, or the store says it is
// gone) every term on it ends, the store releases it, and the session starts
// over with a new lease; campaigns in progress continue on the new one.
type Session struct {
	cfg   Config
	store Store
	log   *slog.Logger
	clock clock

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu      sync.Mutex
	cur     *Lease          // the live lease, nil while between leases
	changed chan struct{}   // closed and replaced whenever cur changes
	fatal   error           // set when the session cannot go on (duplicate instance)
	past    map[string]bool // Held.ID of every lease this session held or wrote under (Lease.Own)
	busy    busy

	stats stats
}

// NewSession starts a session on store in the background: it opens a lease,
// registers the instance, and keeps the lease alive until Close. It returns
// at once; WaitReady waits for the first lease. Backends' constructors
// (etcdlease.NewSession, kubelease.NewSession) call it with their store.
func NewSession(store Store) (*Session, error) {
	if store == nil {
		return nil, errors.New("leadership: a session needs a store (a backend's NewSession gives it one)")
	}
	cfg, err := store.Config().WithDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		cfg: cfg, store: store, log: cfg.Logger.With("instance", cfg.Instance), clock: newClock(cfg.Clock),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}),
		past: map[string]bool{}, busy: busy{jobs: map[string]*busySlot{}},
	}
	go s.run()
	return s, nil
}

// Start is NewSession on the store a backend's constructor has just made, or
// the constructor's error: a backend's NewSession is
// leadership.Start(newStore(cfg)).
func Start(store Store, err error) (*Session, error) {
	if err != nil {
		return nil, err
	}
	return NewSession(store)
}

// Instance is the configured instance name.
func (s *Session) Instance() string { return s.cfg.Instance }

// Config returns the session's configuration with defaults filled in.
func (s *Session) Config() Config { return s.cfg }

// clock is a session's clock: Config.Clock's nanoseconds since base, the
// scale of every deadline (one atomic word each).
type clock struct {
	src  Clock
	base time.Duration
}

func newClock(src Clock) clock        { return clock{src: src, base: src.Now()} }
func (c clock) now() int64            { return int64(c.src.Now() - c.base) }
func (c clock) at(ns int64) time.Time { return time.Now().Add(time.Duration(ns - c.now())) } // for people and time.Until: as seen now

// Instant is a reading of a session's clock (Lease.Now): when a request that
// moves a lease's deadline was sent. Time is the same instant on Go's clock,
// for the store's own pacing and for people (Stats.LastRenewal).
type Instant struct {
	ns int64
	at time.Time
}

// Time is the instant as time.Now said it.
func (i Instant) Time() time.Time { return i.at }

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

// Close ends every term (ReasonShutdown), has the store release the lease so
// that successors win at once, and stops the session. It waits for that
// until ctx is done.
func (s *Session) Close(ctx context.Context) error {
	s.cancel()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("leadership: close: %w", ctx.Err())
	}
}

// WatchInstances calls f with the names of the instances that are up, sorted,
// at once and after each change, until ctx ends.
func (s *Session) WatchInstances(ctx context.Context, f func(names []string)) {
	s.store.WatchInstances(ctx, f)
}

// WatchResignRequests calls f for each operator's request (Resign) that
// the term of job with token hand over, until ctx ends. The same request may
// come twice: f must be idempotent, as resigning is.
func (s *Session) WatchResignRequests(ctx context.Context, f func(job string, token int64)) {
	s.store.WatchResignRequests(ctx, f)
}

// ClusterLoad counts the terms each instance that is up leads, by instance
// name, for a scheduler that spreads singletons over instances.
func (s *Session) ClusterLoad(ctx context.Context) (map[string]int, error) {
	return s.store.ClusterLoad(ctx)
}

// Deregister makes peers stop counting this instance as up while its terms
// stay valid. A process shutting down calls it before resigning its terms, so
// that the instances taking them over do not wait for it (a scheduler
// spreading singletons holds back while a live instance leads fewer terms).
// A later lease registers again.
func (s *Session) Deregister(ctx context.Context) error {
	s.mu.Lock()
	l := s.cur
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	if err := l.held.Deregister(ctx); err != nil {
		return fmt.Errorf("leadership: deregister %q: %w", s.cfg.Instance, err)
	}
	return nil
}

// waitLease returns the live lease, waiting for one while between leases.
func (s *Session) waitLease(ctx context.Context) (*Lease, error) {
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

func (s *Session) setCurrent(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = l
	if l != nil {
		s.past[l.held.ID()] = true
	}
	close(s.changed)
	s.changed = make(chan struct{})
	s.stats.changed.Notify()
}

// run opens leases and keeps each alive until it is lost, until Close. A
// store that cannot open one is tried again after a pause that doubles up to
// the renew interval.
func (s *Session) run() {
	defer close(s.done)
	retry, fails := s.cfg.RenewInterval/8, 0
	for s.ctx.Err() == nil {
		l := s.newLease()
		held, err := s.store.Open(s.ctx, l)
		if err != nil {
			l.stop(Ended(ReasonShutdown, "lease not opened"))
			if errors.Is(err, ErrDuplicateInstance) {
				s.log.Error("session stopped", "err", err)
				s.mu.Lock()
				s.fatal = err
				s.mu.Unlock()
				return
			}
			if fails++; s.ctx.Err() == nil {
				level := slog.LevelDebug
				if fails == 1 {
					level = slog.LevelWarn
				}
				s.log.Log(context.Background(), level, "cannot start a lease; retrying", "err", err, "retry_in", retry, "failures", fails)
			}
			sleep.For(s.ctx, retry)
			retry = min(2*retry, s.cfg.RenewInterval)
			continue
		}
		fails = 0
		l.held = held
		s.setCurrent(l)
		s.log.Info("lease granted", "lease", held.ID(), "ttl", time.Duration(l.ttl.Load()), "deadline_in", max(0, time.Until(l.Deadline())))
		cause := held.KeepAlive(s.ctx)
		if l.renewals.Load() > 0 {
			retry = s.cfg.RenewInterval / 8 // the store answered renewals: start over at once
		}
		l.stop(cause)
		s.setCurrent(nil)
		s.stats.add(&s.stats.leaseEnds[reasonIndex[cause.Reason]], 1)
		level := slog.LevelWarn
		if cause.Reason == ReasonShutdown {
			level = slog.LevelInfo
		}
		s.log.Log(context.Background(), level, "lease ended", "lease", held.ID(), "reason", cause.Reason, "detail", cause.Detail)
		held.Release(s.ctx, cause)
	}
}
