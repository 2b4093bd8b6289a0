package kubelease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/leadership"
)

// errLost: the instance Lease was taken or deleted by someone else.
var errLost = errors.New("instance Lease changed by another writer")

// keepAlive renews l every renew interval until it ends; it returns why.
// A failed renewal is tried again at a quarter of the interval until the
// deadline, whose timer ends the lease.
func (s *Session) keepAlive(l *lease) *leadership.EndedError {
	t := time.NewTimer(s.cfg.RenewInterval)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-s.ctx.Done():
			return &leadership.EndedError{Reason: leadership.ReasonShutdown}
		case <-l.ctx.Done():
			var e *leadership.EndedError
			if errors.As(context.Cause(l.ctx), &e) {
				return e
			}
			return &leadership.EndedError{Reason: leadership.ReasonExpired}
		case <-t.C:
		}
		err := s.renew(l.ctx, l, false)
		switch {
		case err == nil:
			if fails > 0 {
				s.log.Info("instance Lease renewed again", "failures", fails)
			}
			fails = 0
			t.Reset(s.cfg.RenewInterval)
		case errors.Is(err, errLost):
			return &leadership.EndedError{Reason: leadership.ReasonLeaseLost, Detail: err.Error()}
		default:
			fails++
			s.stats.add(&s.stats.keepAliveFailures, 1)
			level := slog.LevelDebug
			if fails == 1 {
				level = slog.LevelInfo
			}
			s.log.Log(context.Background(), level, "renewal of the instance Lease failed; retrying", "err", err, "failures", fails)
			t.Reset(s.cfg.RenewInterval / 4)
		}
	}
}

// renew writes the instance Lease with a new renewTime under its
// resourceVersion; leaving marks it so that peers stop counting the instance
// as up (Deregister). A success moves the deadline to the request's send time
// + TTL − margin: a peer judges the instance gone only after it has seen the
// version this wrote unchanged for the TTL, and it cannot see it before it
// was written. A conflict whose fresh read still names l's holder was this
// session's own write whose answer was lost: adopt it (without moving the
// deadline) and try again.
func (s *Session) renew(ctx context.Context, l *lease, leaving bool) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	obj := l.obj.DeepCopy()
	now := metav1.NowMicro()
	obj.Spec.RenewTime = &now
	if leaving || obj.Annotations[annLeaving] != "" {
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		obj.Annotations[annLeaving] = leavingMarker
	}
	// Up to the deadline, not one renew interval: a renewal given up on
	// while the API server still commits it makes the next one conflict (one
	// more read); after the deadline it could not renew anything.
	sentAt := s.now()
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.RenewInterval, time.Duration(l.dl.Load()-sentAt)))
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel)
	defer stop()
	s.stats.add(&s.stats.keepAlivesSent, 1)
	res, err := s.leases.Update(ctx, obj, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return errLost
	case apierrors.IsConflict(err):
		cur, gerr := s.leases.Get(ctx, obj.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			return errLost
		case gerr != nil:
			return gerr
		case holderOf(cur) != l.holder:
			return errLost
		}
		l.obj = cur
		return err
	case err != nil:
		return err
	}
	l.obj = res
	s.obs.put(res)
	nowNs := s.now()
	nd, ok := l.dl.Renew(sentAt, s.cfg.TTL, s.cfg.Margin, nowNs)
	if !ok {
		l.end(nowNs, &leadership.EndedError{Reason: leadership.ReasonExpired, Detail: "renewal answered after the deadline"})
		return nil
	}
	l.lastDeadline.Store(nd)
	l.timer.Reset(time.Duration(nd - nowNs))
	s.stats.changed.Notify()
	return nil
}

// Deregister marks the instance Lease leaving, with a renewal made at once:
// peers stop counting this instance as up (WatchInstances, ClusterLoad)
// while its terms stay valid and the Lease is still renewed. Unlike
// leadership's, it cannot delete the Lease: that would free every job this
// instance leads while its terms are valid. A later incarnation is not
// marked.
func (s *Session) Deregister(ctx context.Context) error {
	s.mu.Lock()
	l := s.cur
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	if err := s.renew(ctx, l, true); err != nil {
		return fmt.Errorf("kubelease: deregister %q: %w", s.cfg.Instance, err)
	}
	return nil
}
