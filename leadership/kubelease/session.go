package kubelease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/internal/deadline"
)

// Session holds this process's instance Lease, renews it, and hands out
// terms. When the instance Lease is lost (deadline passed, or someone else
// changed it) every term ends, and the session takes its instance Lease
// again under a new holder identity; campaigns in progress continue then.
type Session struct {
	cfg    Config
	log    *slog.Logger
	base   time.Time // monotonic origin of every deadline
	leases coordclient.LeaseInterface

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	cur     *lease
	changed chan struct{} // closed and replaced whenever cur changes
	fatal   error
	past    map[string]bool // holder identities this session used
	busy    map[string]*busySlot

	obs   *observer
	stats stats

	// afterWin, when set by a test in this package, runs between the API
	// server's answer to a winning write and the deadline check: a pause at
	// the worst moment.
	afterWin func()
}

// lease is one incarnation of this instance's Lease: the holder identity
// written into it and into every job Lease won while it lives, and the
// deadline all those terms share.
type lease struct {
	holder       string // "<instance>/<random>"
	dl           *deadline.Deadline
	lastDeadline atomic.Int64
	endNs        atomic.Int64
	ctx          context.Context
	cancel       context.CancelCauseFunc
	timer        *time.Timer

	wmu sync.Mutex     // serialises writes of the instance Lease
	obj *coordv1.Lease // as last written (guarded by wmu)
}

func (l *lease) end(now int64, cause *leadership.EndedError) {
	if l.dl.Kill() {
		l.endNs.CompareAndSwap(0, now)
	}
	l.cancel(cause)
}

// DuplicateInstanceError means the instance Lease of this name was renewed
// by someone else while this session waited to take it over: another live
// process uses this instance name. The session stops.
type DuplicateInstanceError struct {
	Instance, Lease, Holder string
}

func (e *DuplicateInstanceError) Error() string {
	return fmt.Sprintf("kubelease: instance %q: Lease %s is renewed by %q, a live process; "+
		"every server needs its own instance name", e.Instance, e.Lease, e.Holder)
}

// NewSession validates cfg and starts the session in the background: it
// takes the instance Lease and renews it until Close. WaitReady waits for it.
func NewSession(cfg Config) (*Session, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		cfg: cfg, log: cfg.Logger.With("instance", cfg.Instance), base: time.Now(),
		leases: cfg.Client.Leases(cfg.Namespace),
		ctx:    ctx, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}),
		past: map[string]bool{}, busy: map[string]*busySlot{},
	}
	s.obs = newObserver(s)
	go s.obs.run(ctx)
	go s.run()
	return s, nil
}

// Config gives the session's timing and names; Client is nil (the session
// talks to Kubernetes, not etcd).
func (s *Session) Config() leadership.Config { return s.cfg.leadershipConfig() }

// Instance is the configured instance name.
func (s *Session) Instance() string { return s.cfg.Instance }

func (s *Session) now() int64            { return int64(time.Since(s.base)) }
func (s *Session) at(ns int64) time.Time { return s.base.Add(time.Duration(ns)) }
func (s *Session) ownPast(holder string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.past[holder]
}

// WaitReady waits until the session holds its instance Lease, or returns the
// fatal error that stopped it.
func (s *Session) WaitReady(ctx context.Context) error {
	_, err := s.waitLease(ctx)
	return err
}

// Done is closed when the session has stopped.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is the fatal error that stopped the session, ErrClosed after Close, or nil.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal != nil {
		return s.fatal
	}
	if s.ctx.Err() != nil {
		return leadership.ErrClosed
	}
	return nil
}

// Close ends every term (ReasonShutdown) and deletes the instance Lease, so
// that every job Lease naming it can be taken at once, then stops.
func (s *Session) Close(ctx context.Context) error {
	s.cancel()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kubelease: close: %w", ctx.Err())
	}
}

func (s *Session) waitLease(ctx context.Context) (*lease, error) {
	for {
		s.mu.Lock()
		l, changed, fatal := s.cur, s.changed, s.fatal
		s.mu.Unlock()
		switch {
		case fatal != nil:
			return nil, fatal
		case s.ctx.Err() != nil:
			return nil, leadership.ErrClosed
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
		s.past[l.holder] = true
	}
	close(s.changed)
	s.changed = make(chan struct{})
	s.stats.changed.Notify()
}

// run takes the instance Lease and renews it until it is lost, until Close.
func (s *Session) run() {
	defer close(s.done)
	fails := 0
	for s.ctx.Err() == nil {
		l, err := s.acquire()
		if err != nil {
			fails++
			var dup *DuplicateInstanceError
			if errors.As(err, &dup) {
				s.log.Error("session stopped", "err", err)
				s.mu.Lock()
				s.fatal = err
				s.mu.Unlock()
				return
			}
			if level := slog.LevelDebug; s.ctx.Err() == nil {
				if fails == 1 {
					level = slog.LevelWarn
				}
				s.log.Log(context.Background(), level, "cannot take the instance Lease; retrying", "err", err, "failures", fails)
			}
			sleep.For(s.ctx, s.cfg.RenewInterval/4)
			continue
		}
		fails = 0
		s.setCurrent(l)
		cause := s.keepAlive(l)
		l.end(s.now(), cause)
		l.timer.Stop()
		s.setCurrent(nil)
		s.stats.add(&s.stats.leaseEnds[reasonIndex[cause.Reason]], 1)
		s.log.Warn("instance Lease ended", "holder", l.holder, "reason", cause.Reason, "detail", cause.Detail)
		if cause.Reason == leadership.ReasonShutdown {
			s.deleteInstance(l)
		}
	}
}

// newHolder is a fresh holder identity for an incarnation of the instance Lease.
func (s *Session) newHolder() string {
	b := make([]byte, 8)
	rand.Read(b)
	return s.cfg.Instance + "/" + hex.EncodeToString(b)
}

func (s *Session) instanceObject(holder string, cur *coordv1.Lease) *coordv1.Lease {
	obj := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.cfg.instanceLease(s.cfg.Instance)}}
	if cur != nil {
		obj = cur.DeepCopy()
	}
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	obj.Labels[labelRole], obj.Labels[labelSet], obj.Labels[labelName] = roleInstance, s.cfg.Prefix, s.cfg.Instance
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	delete(obj.Annotations, annExpiredBy)
	delete(obj.Annotations, annLeaving)
	obj.Annotations[annHost], obj.Annotations[annPID] = s.cfg.Host, strconv.Itoa(os.Getpid())
	now := metav1.NowMicro()
	secs := int32(s.cfg.TTL / time.Second)
	obj.Spec = coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}
	if cur != nil && cur.Spec.LeaseTransitions != nil {
		n := *cur.Spec.LeaseTransitions + 1
		obj.Spec.LeaseTransitions = &n
	}
	return obj
}

// acquire takes the instance Lease: creates it; or takes it when released,
// or left by this session's own earlier incarnation; or, when another holder
// has it, once this session has seen it unchanged for its duration (the
// holder is gone: its deadline has passed), with the resourceVersion seen
// as precondition. A Lease renewed meanwhile means a duplicate instance.
func (s *Session) acquire() (*lease, error) {
	name := s.cfg.instanceLease(s.cfg.Instance)
	holder := s.newHolder()
	for attempt := 0; ; attempt++ {
		// Long enough to wait out a gone predecessor's duration (waitGone).
		ctx, cancel := context.WithTimeout(s.ctx, 3*s.cfg.TTL)
		l, retry, err := s.acquireOnce(ctx, name, holder)
		cancel()
		if !retry {
			return l, err
		}
		if attempt >= 5 {
			return nil, fmt.Errorf("instance Lease %s keeps changing under this session (last: %v)", name, err)
		}
	}
}

// acquireOnce is one attempt of acquire; retry means a race was lost.
func (s *Session) acquireOnce(ctx context.Context, name, holder string) (_ *lease, retry bool, _ error) {
	{
		cur, err := s.leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			sentAt := s.now()
			res, err := s.leases.Create(ctx, s.instanceObject(holder, nil), metav1.CreateOptions{})
			if err != nil {
				return nil, apierrors.IsAlreadyExists(err), fmt.Errorf("create instance Lease %s: %w", name, err)
			}
			return s.newLease(holder, res, sentAt), false, nil
		case err != nil:
			return nil, false, fmt.Errorf("read instance Lease %s: %w", name, err)
		}
		if h := holderOf(cur); h != "" && !s.ownPast(h) {
			if retry, err := s.waitGone(cur); retry || err != nil {
				return nil, retry, err
			}
			s.stats.add(&s.stats.reclaimed, 1)
		}
		sentAt := s.now()
		res, err := s.leases.Update(ctx, s.instanceObject(holder, cur), metav1.UpdateOptions{})
		if err != nil {
			return nil, apierrors.IsConflict(err), fmt.Errorf("take instance Lease %s: %w", name, err)
		}
		return s.newLease(holder, res, sentAt), false, nil
	}
}

// waitGone returns once cur (another holder's instance Lease) has been seen
// unchanged for its duration on this session's clock; retry when it was
// released or deleted meanwhile (read it again); a DuplicateInstanceError
// when it was renewed or taken by another holder. The caller's update
// carries cur's resourceVersion, so a renewal after this returns makes that
// update fail.
func (s *Session) waitGone(cur *coordv1.Lease) (retry bool, _ error) {
	holder := holderOf(cur)
	s.log.Info("the instance Lease is held by another process; waiting to see it unchanged for its duration",
		"lease", cur.Name, "holder", holder)
	s.obs.put(cur)
	for {
		st, ok, changed := s.obs.get(cur.Name)
		switch {
		case !ok || st.lease.ResourceVersion != cur.ResourceVersion && holderOf(st.lease) == "":
			return true, nil // deleted, released or expired by a peer meanwhile
		case st.lease.ResourceVersion != cur.ResourceVersion:
			return false, &DuplicateInstanceError{Instance: s.cfg.Instance, Lease: cur.Name, Holder: holderOf(st.lease)}
		}
		left := time.Duration(st.seenAt + int64(s.durationOf(st.lease)) - s.now())
		if left <= 0 {
			return false, nil
		}
		t := time.NewTimer(left)
		select {
		case <-changed:
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return false, s.ctx.Err()
		}
		t.Stop()
	}
}

func (s *Session) newLease(holder string, obj *coordv1.Lease, sentAt int64) *lease {
	l := &lease{holder: holder, obj: obj, dl: deadline.New(sentAt, s.cfg.TTL, s.cfg.Margin)}
	l.lastDeadline.Store(l.dl.Load())
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	l.timer = time.AfterFunc(time.Duration(l.dl.Load()-s.now()), func() { s.checkDeadline(l) })
	s.stats.add(&s.stats.leasesGranted, 1)
	s.obs.put(obj)
	s.log.Info("instance Lease taken", "holder", holder, "deadline_in", time.Duration(l.dl.Load()-s.now()))
	return l
}

func (s *Session) checkDeadline(l *lease) {
	if now := s.now(); !l.dl.Valid(now) {
		l.end(now, &leadership.EndedError{Reason: leadership.ReasonExpired, Detail: "instance Lease not renewed in time"})
	}
}

// deleteInstance deletes the instance Lease as last written (best effort:
// a peer that sees it unchanged for its duration takes over anyway).
func (s *Session) deleteInstance(l *lease) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TTL)
	defer cancel()
	l.wmu.Lock()
	rv := l.obj.ResourceVersion
	l.wmu.Unlock()
	err := s.leases.Delete(ctx, l.obj.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Warn("delete instance Lease failed", "err", err)
	}
}

// holderOf is a Lease's holder identity, "" when released.
func holderOf(l *coordv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// durationOf is how long a Lease must be seen unchanged before its holder
// counts as gone: its leaseDurationSeconds, or this session's TTL when unset.
func (s *Session) durationOf(l *coordv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return s.cfg.TTL
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

const deadlineDead = deadline.Dead
