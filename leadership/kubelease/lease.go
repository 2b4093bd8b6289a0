package kubelease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/leadership"
)

// lease is one incarnation of this instance's Lease: the holder identity
// written into it and into every job Lease won while it lives. Its deadline
// is the session's (leadership.Lease).
type lease struct {
	st     *store
	l      *leadership.Lease
	holder string // "<instance>/<random>"

	wmu sync.Mutex     // serialises writes of the instance Lease
	obj *coordv1.Lease // as last written (guarded by wmu)
}

func (h *lease) ID() string { return h.holder }

// DuplicateInstanceError means the instance Lease of this name is held by
// another live process: renewed by someone else while this session waited
// to take it over, or written by a running process of this host. It wraps
// leadership.ErrDuplicateInstance: the session stops.
type DuplicateInstanceError struct {
	Instance, Lease, Holder string
}

func (e *DuplicateInstanceError) Unwrap() error { return leadership.ErrDuplicateInstance }

func (e *DuplicateInstanceError) Error() string {
	return fmt.Sprintf("kubelease: instance %q: Lease %s is renewed by %q, a live process; "+
		"every server needs its own instance name", e.Instance, e.Lease, e.Holder)
}

// Open takes the instance Lease under a new holder identity: creates it; or
// takes it when released, or left by this session's own earlier
// incarnation, or written by a process of this host proven gone (death
// reclaim at start); or, when another holder has it, once this session has
// seen it unchanged for its duration (the holder is gone: its deadline has
// passed), with the resourceVersion seen as precondition. A Lease renewed
// meanwhile means a duplicate instance.
func (st *store) Open(ctx context.Context, l *leadership.Lease) (leadership.Held, error) {
	st.obsOnce.Do(func() { go st.obs.run(ctx) })
	name := st.cfg.instanceLease(st.cfg.Instance)
	h := &lease{st: st, l: l, holder: st.newHolder()}
	for attempt := 0; ; attempt++ {
		// Long enough to wait out a gone predecessor's duration (waitGone).
		actx, cancel := context.WithTimeout(ctx, 3*st.cfg.TTL)
		retry, err := h.acquire(actx, name)
		cancel()
		switch {
		case !retry && err != nil:
			return nil, err
		case !retry:
			st.obs.put(h.obj)
			return h, nil
		case attempt >= 5:
			return nil, fmt.Errorf("instance Lease %s keeps changing under this session (last: %v)", name, err)
		}
	}
}

// newHolder is a fresh holder identity for an incarnation of the instance Lease.
func (st *store) newHolder() string {
	b := make([]byte, 8)
	rand.Read(b)
	return st.cfg.Instance + "/" + hex.EncodeToString(b)
}

// acquire is one attempt of Open; retry means a race was lost.
func (h *lease) acquire(ctx context.Context, name string) (retry bool, _ error) {
	st := h.st
	cur, err := st.leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return h.write(ctx, nil, func(ctx context.Context, obj *coordv1.Lease) (*coordv1.Lease, error) {
			return st.leases.Create(ctx, obj, metav1.CreateOptions{})
		})
	case err != nil:
		return false, fmt.Errorf("read instance Lease %s: %w", name, err)
	}
	if hl := holderOf(cur); hl != "" && !h.l.HeldBefore(hl) {
		if retry, err := h.predecessorGone(ctx, cur); retry || err != nil {
			return retry, err
		}
		h.l.Reclaimed()
	}
	return h.write(ctx, cur, func(ctx context.Context, obj *coordv1.Lease) (*coordv1.Lease, error) {
		return st.leases.Update(ctx, obj, metav1.UpdateOptions{})
	})
}

// write writes the instance Lease (created, or updated from cur) naming this
// incarnation, and starts the session's lease from the request's send time.
// The holder is the session's own first (Lease.Own): a write whose answer is
// lost may have landed, and the Lease then names a holder of this session,
// not another process (acquire takes it over). The request ends after a
// TTL, not with ctx: a session closed meanwhile learns what it took, and
// releases it.
func (h *lease) write(ctx context.Context, cur *coordv1.Lease, do func(context.Context, *coordv1.Lease) (*coordv1.Lease, error)) (retry bool, _ error) {
	h.l.Own(h.holder)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.st.cfg.TTL)
	defer cancel()
	sent := h.l.Now()
	res, err := do(wctx, h.st.instanceObject(h.holder, cur))
	if err != nil {
		lost := apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err)
		return lost, fmt.Errorf("take instance Lease %s: %w", h.st.cfg.instanceLease(h.st.cfg.Instance), err)
	}
	h.obj = res
	h.l.Start(sent, h.st.cfg.TTL)
	return false, nil
}

// predecessorGone returns once cur's holder is gone: at once when its
// process, on this host, is proven dead (its annotations name it); else once
// this session has seen cur unchanged for its duration (waitGone).
func (h *lease) predecessorGone(ctx context.Context, cur *coordv1.Lease) (retry bool, _ error) {
	st := h.st
	reg := registrationOf(cur)
	err := reg.Gone(st.cfg.Host)
	switch {
	case err == nil:
		st.log.Info("the instance Lease's process is gone; taking it over so its jobs move now",
			"lease", cur.Name, "holder", reg.Lease, "pid", reg.PID)
		return false, nil
	case errors.Is(err, leadership.ErrStillRunning):
		return false, &DuplicateInstanceError{Instance: st.cfg.Instance, Lease: cur.Name, Holder: reg.Lease}
	}
	return h.waitGone(ctx, cur)
}

// waitGone returns once cur (another holder's instance Lease) has been seen
// unchanged for its duration on this store's clock; retry when it was
// released or deleted meanwhile (read it again); a DuplicateInstanceError
// when it was renewed or taken by another holder. The caller's update
// carries cur's resourceVersion, so a renewal after this returns makes that
// update fail.
func (h *lease) waitGone(ctx context.Context, cur *coordv1.Lease) (retry bool, _ error) {
	st := h.st
	holder := holderOf(cur)
	st.log.Info("the instance Lease is held by another process; waiting to see it unchanged for its duration",
		"lease", cur.Name, "holder", holder)
	st.obs.put(cur)
	for {
		seen, ok, changed := st.obs.get(cur.Name)
		switch {
		case !ok || seen.lease.ResourceVersion != cur.ResourceVersion && holderOf(seen.lease) == "":
			return true, nil // deleted, released or expired by a peer meanwhile
		case seen.lease.ResourceVersion != cur.ResourceVersion:
			return false, &DuplicateInstanceError{Instance: st.cfg.Instance, Lease: cur.Name, Holder: holderOf(seen.lease)}
		}
		left := time.Duration(seen.seenAt + int64(st.durationOf(seen.lease)) - st.now())
		if left <= 0 {
			return false, nil
		}
		t := time.NewTimer(left)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		}
		t.Stop()
	}
}

func (st *store) instanceObject(holder string, cur *coordv1.Lease) *coordv1.Lease {
	obj := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: st.cfg.instanceLease(st.cfg.Instance)}}
	if cur != nil {
		obj = cur.DeepCopy()
	}
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	obj.Labels[labelRole], obj.Labels[labelSet], obj.Labels[labelName] = roleInstance, st.cfg.Prefix, st.cfg.Instance
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	delete(obj.Annotations, annExpiredBy)
	delete(obj.Annotations, annLeaving)
	p := leadership.ThisProcess(st.cfg.Host)
	obj.Annotations[annHost], obj.Annotations[annPID] = p.Host, strconv.Itoa(p.PID)
	obj.Annotations[annProcStart], obj.Annotations[annPIDNS] = strconv.FormatUint(p.Start, 10), p.PIDNamespace
	obj.Annotations[annStarted] = p.Since().UTC().Format(time.RFC3339Nano)
	now := metav1.NowMicro()
	secs := int32(st.cfg.TTL / time.Second)
	obj.Spec = coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}
	if cur != nil && cur.Spec.LeaseTransitions != nil {
		n := *cur.Spec.LeaseTransitions + 1
		obj.Spec.LeaseTransitions = &n
	}
	return obj
}

// registrationOf is what an instance Lease says of its holder's process.
func registrationOf(l *coordv1.Lease) leadership.Registration {
	r := leadership.Registration{Instance: l.Labels[labelName], Lease: holderOf(l)}
	r.Host, r.PIDNamespace = l.Annotations[annHost], l.Annotations[annPIDNS]
	r.PID, _ = strconv.Atoi(l.Annotations[annPID])                      // unreadable: 0, never proven gone
	r.Start, _ = strconv.ParseUint(l.Annotations[annProcStart], 10, 64) // unreadable: 0, the PID alone
	r.Started = startedOf(l)
	return r
}

// startedOf is when an instance Lease's process started, as it wrote it; a
// release that did not write it: when its holder acquired the Lease.
func startedOf(l *coordv1.Lease) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, l.Annotations[annStarted]); err == nil {
		return t
	}
	if l.Spec.AcquireTime != nil {
		return l.Spec.AcquireTime.Time
	}
	return time.Time{}
}

// Release deletes the instance Lease as last written when the session
// closes, so that every job Lease naming it can be taken at once (best
// effort: a peer that sees it unchanged for its duration takes over anyway).
// When the version moved under it — a write of this incarnation whose
// answer was lost, such as a Deregister cut short by the close — it deletes
// the Lease as read again if that still names this incarnation. A lease
// that expired or was taken is left to its fate.
func (h *lease) Release(ctx context.Context, cause *leadership.EndedError) {
	if cause.Reason != leadership.ReasonShutdown {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.st.cfg.TTL)
	defer cancel()
	h.wmu.Lock()
	name, rv := h.obj.Name, h.obj.ResourceVersion
	h.wmu.Unlock()
	for range 5 {
		err := h.st.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		if !apierrors.IsConflict(err) {
			h.st.log.Warn("delete instance Lease failed", "err", err)
			return
		}
		cur, err := h.st.leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return
		case err != nil:
			h.st.log.Warn("delete instance Lease failed", "err", err)
			return
		case holderOf(cur) != h.holder:
			return
		}
		rv = cur.ResourceVersion
	}
	h.st.log.Warn("delete instance Lease failed: it keeps changing", "lease", name)
}

// holderOf is a Lease's holder identity, "" when released.
func holderOf(l *coordv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// durationOf is how long a Lease must be seen unchanged before its holder
// counts as gone: its leaseDurationSeconds, or this store's TTL when unset.
func (st *store) durationOf(l *coordv1.Lease) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return st.cfg.TTL
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}
