package kubelease

import (
	"context"
	"fmt"
	"strconv"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/leadership"
)

// Contend judges the job Lease as the observer holds it and takes it when
// it is absent, released, or its holder is gone: its instance Lease deleted,
// held by someone else, or seen unchanged for its duration (then first marked
// expired, under the resourceVersion seen). Otherwise it waits for a change
// of the job Lease or of its holder's instance Lease, or for that duration to
// run out, and returns for the session to judge again.
func (h *lease) Contend(ctx context.Context, job string) (leadership.Claim, error) {
	if err := h.st.obs.waitSynced(ctx); err != nil {
		return nil, err
	}
	c, err := h.contend(ctx, job)
	if c == nil {
		return nil, err
	}
	return c, nil
}

// contend judges the job Lease as the observer holds it and takes it when it
// is free, or waits until it may be; it returns (nil, nil) when the caller
// should judge again after the holdback (a wait ended with the job free, or
// a write lost a race).
func (h *lease) contend(ctx context.Context, job string) (*claim, error) {
	st := h.st
	waited := false
	for {
		if h.l.Context().Err() != nil {
			return nil, nil
		}
		jl, jobChanged := st.obs.lease(st.cfg.jobLease(job))
		holder := holderOf(jl)
		free := jl == nil || holder == "" || h.l.HeldBefore(holder)
		var due time.Duration
		var holderChanged <-chan struct{}
		if !free {
			var err error
			if free, due, holderChanged, err = st.holderGone(ctx, jl); err != nil {
				return nil, err
			}
		}
		switch {
		case free && waited:
			return nil, nil
		case free:
			return h.take(ctx, job, jl)
		case due <= 0:
			continue // an expiry lost a race with a renewal: judge the new version
		}
		waited = true
		if !h.wait(ctx, jobChanged, holderChanged, due) {
			return nil, nil
		}
	}
}

// wait waits for a change of the job Lease or of its holder's instance
// Lease, the due time, the end of this session's instance Lease or of ctx;
// false for the last two.
func (h *lease) wait(ctx context.Context, jobChanged, holderChanged <-chan struct{}, due time.Duration) bool {
	defer h.l.Waiting()()
	t := time.NewTimer(due)
	defer t.Stop()
	select {
	case <-jobChanged:
	case <-holderChanged:
	case <-t.C:
	case <-h.l.Context().Done():
		return false
	case <-ctx.Done():
		return false
	}
	return true
}

// holderGone judges jl's holder: gone when its instance Lease is absent or
// names another holder, or when this session has seen it unchanged for its
// duration and has now marked it expired, under the resourceVersion seen, so
// that a renewal racing this fails. Otherwise due says how long until that
// duration runs out, and changed is closed at the instance Lease's next change.
func (st *store) holderGone(ctx context.Context, jl *coordv1.Lease) (gone bool, due time.Duration, changed <-chan struct{}, err error) {
	holder, name := holderOf(jl), jl.Annotations[annInstance]
	if name == "" {
		return false, 0, nil, fmt.Errorf("job Lease %s is held by %q but names no instance Lease (annotation %s)", jl.Name, holder, annInstance)
	}
	seen, ok, changed := st.obs.get(name)
	if !ok || holderOf(seen.lease) != holder {
		// jl may be a fresh read put in ahead of the watch: ask the API server.
		il, err := st.leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, 0, nil, nil
		}
		if err != nil {
			return false, 0, nil, err
		}
		if holderOf(il) != holder {
			return true, 0, nil, nil
		}
		st.obs.put(il)
		seen, _, changed = st.obs.get(name)
	}
	due = time.Duration(seen.seenAt + int64(st.durationOf(seen.lease)) - st.now())
	if due > 0 {
		return false, due, changed, nil
	}
	gone, err = st.expire(ctx, seen.lease)
	return gone, 0, changed, err
}

// expire marks a peer's instance Lease, seen unchanged for its duration,
// released and expired (by this instance), under the resourceVersion seen.
// When that fails because the Lease changed, the observer is given a fresh
// read: its copy may be older than the Lease (a read put in after a watch
// event), and the caller waits on the observer's next change.
func (st *store) expire(ctx context.Context, il *coordv1.Lease) (bool, error) {
	obj := il.DeepCopy()
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations[annExpiredBy] = st.cfg.Instance
	obj.Spec.HolderIdentity = nil
	res, err := st.leases.Update(ctx, obj, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		st.obs.del(il.Name)
		return false, nil
	case apierrors.IsConflict(err):
		return false, st.refresh(ctx, il.Name) // renewed or taken meanwhile: judge again
	case err != nil:
		return false, err
	}
	st.obs.put(res)
	st.expired.Add(1)
	st.log.Warn("marked a peer's instance Lease expired: unchanged for its duration", "lease", il.Name, "holder", holderOf(il))
	return true, nil
}

// refresh gives the observer a fresh read of the Lease name, after a write
// made on its copy lost a race: the copy may be older than the watch has
// delivered yet, and judging it again would lose again.
func (st *store) refresh(ctx context.Context, name string) error {
	cur, err := st.leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		st.obs.del(name)
	case err != nil:
		return err
	default:
		st.obs.put(cur)
	}
	return nil
}

// tokenOf is the job Lease's token annotation (0 when absent).
func tokenOf(jl *coordv1.Lease) (int64, error) {
	if jl == nil || jl.Annotations[annToken] == "" {
		return 0, nil
	}
	t, err := strconv.ParseInt(jl.Annotations[annToken], 10, 64)
	if err != nil || t < 0 {
		return 0, fmt.Errorf("job Lease %s: unreadable token annotation %s=%q", jl.Name, annToken, jl.Annotations[annToken])
	}
	return t, nil
}

// take writes the job Lease (create, or update under jl's resourceVersion)
// naming l's holder with the token bumped; a lost race returns (nil, nil).
func (h *lease) take(ctx context.Context, job string, jl *coordv1.Lease) (*claim, error) {
	st := h.st
	prev, err := tokenOf(jl)
	if err != nil {
		return nil, err
	}
	token := prev + 1
	obj := jobObject(st.cfg, job, jl)
	obj.Annotations[annToken] = strconv.FormatInt(token, 10)
	obj.Annotations[annInstance] = st.cfg.instanceLease(st.cfg.Instance)
	delete(obj.Annotations, annResign)
	now := metav1.NowMicro()
	secs := int32(st.cfg.TTL / time.Second)
	holder := h.holder
	transitions := int32(0)
	if jl != nil && jl.Spec.LeaseTransitions != nil {
		transitions = *jl.Spec.LeaseTransitions + 1
	}
	obj.Spec = coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now, LeaseTransitions: &transitions}

	// The write is not given up with the campaign (ctx): the API server may
	// commit it with its answer lost, leaving the job Lease naming this
	// incarnation with no term, which no peer would take while the instance
	// Lease is renewed. It ends with the lease (its records go with it) or
	// after a TTL; the session hands back a win the campaign no longer wants.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), st.cfg.TTL)
	defer cancel()
	stop := context.AfterFunc(h.l.Context(), cancel)
	defer stop()
	var res *coordv1.Lease
	if jl == nil {
		res, err = st.leases.Create(rctx, obj, metav1.CreateOptions{})
	} else {
		res, err = st.leases.Update(rctx, obj, metav1.UpdateOptions{})
	}
	switch {
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
		return nil, st.refresh(ctx, obj.Name)
	case err != nil:
		return nil, err
	}
	st.obs.put(res)
	if st.afterWin != nil {
		st.afterWin()
	}
	return &claim{h: h, name: res.Name, token: token}, nil
}

// jobObject is job's Lease to write: a copy of jl (nil: a new one), labelled
// as the set's job Lease.
func jobObject(cfg Config, job string, jl *coordv1.Lease) *coordv1.Lease {
	obj := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: cfg.jobLease(job)}}
	if jl != nil {
		obj = jl.DeepCopy()
	}
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Labels[labelRole], obj.Labels[labelSet], obj.Labels[labelName] = roleJob, cfg.Prefix, job
	return obj
}
