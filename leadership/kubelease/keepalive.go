package kubelease

import (
	"context"
	"errors"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/leadership"
)

// errLost: the instance Lease was taken or deleted by someone else.
var errLost = errors.New("instance Lease changed by another writer")

// KeepAlive renews the instance Lease every renew interval until it ends,
// or ctx (the session) does. A failed renewal is tried again at a quarter
// of the interval until the deadline, whose timer ends the lease.
func (h *lease) KeepAlive(ctx context.Context) *leadership.EndedError {
	st, l := h.st, h.l
	t := time.NewTimer(st.cfg.RenewInterval)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return leadership.Ended(leadership.ReasonShutdown, "")
		case <-l.Context().Done():
			var e *leadership.EndedError
			if errors.As(context.Cause(l.Context()), &e) {
				return e
			}
			return leadership.Ended(leadership.ReasonExpired, "")
		case <-t.C:
		}
		err := h.renew(l.Context(), false)
		if err != nil && !errors.Is(err, errLost) {
			// Its deadline may have passed while it was on its way (a process
			// resumed after a pause): then the lease expired, and no renewal
			// failed; the deadline's own timer may not have run yet.
			l.CheckDeadline()
		}
		switch {
		case err == nil:
			if fails > 0 {
				st.log.Info("instance Lease renewed again", "failures", fails)
			}
			fails = 0
			t.Reset(st.cfg.RenewInterval)
		case errors.Is(err, errLost):
			l.End(leadership.Ended(leadership.ReasonLeaseLost, "%v", err))
		case l.Context().Err() != nil:
			// The lease ended while the renewal was on its way (its deadline
			// passed: a process resumed after a pause); its end says why.
		default:
			fails++
			l.Failed()
			level := slog.LevelDebug
			if fails == 1 {
				level = slog.LevelInfo
			}
			st.log.Log(context.Background(), level, "renewal of the instance Lease failed; retrying", "err", err, "failures", fails)
			t.Reset(st.cfg.RenewInterval / 4)
		}
	}
}

// renew writes the instance Lease with a new renewTime under its
// resourceVersion; leaving marks it so that peers stop counting the instance
// as up (Deregister). A success moves the deadline to the request's send time
// + TTL − margin: a peer judges the instance gone only after it has seen the
// version this wrote unchanged for the TTL, and it cannot see it before it
// was written. A conflict whose fresh read still names this holder was this
// session's own write whose answer was lost: adopt it (without moving the
// deadline) and try again.
func (h *lease) renew(ctx context.Context, leaving bool) error {
	st, l := h.st, h.l
	h.wmu.Lock()
	defer h.wmu.Unlock()
	obj := h.obj.DeepCopy()
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
	sent := l.Now()
	ctx, cancel := context.WithTimeout(ctx, max(st.cfg.RenewInterval, time.Until(l.Deadline())))
	defer cancel()
	stop := context.AfterFunc(l.Context(), cancel)
	defer stop()
	l.Sent()
	res, err := st.leases.Update(ctx, obj, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return errLost
	case apierrors.IsConflict(err):
		cur, gerr := st.leases.Get(ctx, obj.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			return errLost
		case gerr != nil:
			return gerr
		case holderOf(cur) != h.holder:
			return errLost
		}
		h.obj = cur
		return err
	case err != nil:
		return err
	}
	h.obj = res
	st.obs.put(res)
	l.Renewed(sent, st.cfg.TTL)
	return nil
}

// Deregister marks the instance Lease leaving, with a renewal made at once:
// peers stop counting this instance as up (WatchInstances, ClusterLoad)
// while its terms stay valid and the Lease is still renewed. Unlike etcd's,
// it cannot delete the Lease: that would free every job this instance leads
// while its terms are valid. A later incarnation is not marked.
func (h *lease) Deregister(ctx context.Context) error { return h.renew(ctx, true) }
