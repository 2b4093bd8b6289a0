package kubelease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease/layout"
)

type busySlot struct{ term context.Context }

// Campaign blocks until this session wins job, ctx is done, or the session
// closes. Winning is a write of the job Lease, under the resourceVersion
// read, that names this session's current instance-Lease holder and bumps
// the token; it is tried when the job Lease is absent or released, or when
// its holder is gone: its instance Lease deleted, held by someone else, or
// seen unchanged for its duration (then first marked expired, under the
// resourceVersion seen). Otherwise Campaign watches the job Lease and follows
// the instance Leases, and tries again when either changes or the duration
// runs out. leadership.WithHoldback's wait runs before every attempt.
func (s *Session) Campaign(ctx context.Context, job string, opts ...leadership.CampaignOption) (*Term, error) {
	if err := layout.CheckJob(s.cfg.Prefix, job); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if b := s.busy[job]; b != nil && (b.term == nil || b.term.Err() == nil) {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", leadership.ErrBusy, job)
	}
	slot := &busySlot{}
	s.busy[job] = slot
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		if s.busy[job] == slot {
			delete(s.busy, job)
		}
		s.mu.Unlock()
	}
	t, err := s.campaign(ctx, job, leadership.Holdback(opts...))
	if err != nil {
		release()
		return nil, err
	}
	s.mu.Lock()
	slot.term = t.ctx
	s.mu.Unlock()
	context.AfterFunc(t.ctx, release)
	return t, nil
}

func (s *Session) campaign(ctx context.Context, job string, holdback func() time.Duration) (*Term, error) {
	log := s.log.With("job", job)
	for {
		if holdback != nil {
			if d := holdback(); d > 0 && !sleep.For(ctx, d) {
				return nil, ctx.Err()
			}
		}
		l, err := s.waitLease(ctx)
		if err == nil {
			err = s.obs.waitSynced(ctx)
		}
		if err != nil {
			return nil, err
		}
		t, err := s.contend(ctx, l, job)
		switch {
		case t != nil:
			return t, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			log.Debug("campaign attempt failed; retrying", "err", err)
			sleep.For(ctx, s.cfg.RenewInterval/4)
		}
	}
}

// contend judges the job Lease as the observer holds it and takes it when it
// is free, or waits until it may be; it returns (nil, nil) when the caller
// should judge again after the holdback (a wait ended with the job free, or
// a write lost a race).
func (s *Session) contend(ctx context.Context, l *lease, job string) (*Term, error) {
	waited := false
	for {
		if l.ctx.Err() != nil {
			return nil, nil
		}
		jl, jobChanged := s.obs.lease(s.cfg.jobLease(job))
		holder := holderOf(jl)
		free := jl == nil || holder == "" || holder == l.holder || s.ownPast(holder)
		var due time.Duration
		var holderChanged <-chan struct{}
		if !free {
			var err error
			if free, due, holderChanged, err = s.holderGone(ctx, jl); err != nil {
				return nil, err
			}
		}
		switch {
		case free && waited:
			return nil, nil
		case free:
			return s.take(ctx, l, job, jl)
		case due <= 0:
			continue // an expiry lost a race with a renewal: judge the new version
		}
		waited = true
		if !s.wait(ctx, l, jobChanged, holderChanged, due) {
			return nil, nil
		}
	}
}

// wait waits for a change of the job Lease or of its holder's instance
// Lease, the due time, the end of this session's instance Lease or of ctx;
// false for the last two.
func (s *Session) wait(ctx context.Context, l *lease, jobChanged, holderChanged <-chan struct{}, due time.Duration) bool {
	s.stats.add(&s.stats.waiting, 1)
	defer s.stats.add(&s.stats.waiting, -1)
	t := time.NewTimer(due)
	defer t.Stop()
	select {
	case <-jobChanged:
	case <-holderChanged:
	case <-t.C:
	case <-l.ctx.Done():
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
func (s *Session) holderGone(ctx context.Context, jl *coordv1.Lease) (gone bool, due time.Duration, changed <-chan struct{}, err error) {
	holder, name := holderOf(jl), jl.Annotations[annInstance]
	if name == "" {
		return false, 0, nil, fmt.Errorf("job Lease %s is held by %q but names no instance Lease (annotation %s)", jl.Name, holder, annInstance)
	}
	st, ok, changed := s.obs.get(name)
	if !ok || holderOf(st.lease) != holder {
		// jl may be a fresh read put in ahead of the watch: ask the API server.
		il, err := s.leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, 0, nil, nil
		}
		if err != nil {
			return false, 0, nil, err
		}
		if holderOf(il) != holder {
			return true, 0, nil, nil
		}
		s.obs.put(il)
		st, _, changed = s.obs.get(name)
	}
	due = time.Duration(st.seenAt + int64(s.durationOf(st.lease)) - s.now())
	if due > 0 {
		return false, due, changed, nil
	}
	gone, err = s.expire(ctx, st.lease)
	return gone, 0, changed, err
}

// expire marks a peer's instance Lease, seen unchanged for its duration,
// released and expired (by this instance), under the resourceVersion seen.
// When that fails because the Lease changed, the observer is given a fresh
// read: its copy may be older than the Lease (a read put in after a watch
// event), and the caller waits on the observer's next change.
func (s *Session) expire(ctx context.Context, il *coordv1.Lease) (bool, error) {
	obj := il.DeepCopy()
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations[annExpiredBy] = s.cfg.Instance
	obj.Spec.HolderIdentity = nil
	res, err := s.leases.Update(ctx, obj, metav1.UpdateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.obs.del(il.Name)
		return false, nil
	case apierrors.IsConflict(err):
		return false, s.refresh(ctx, il.Name) // renewed or taken meanwhile: judge again
	case err != nil:
		return false, err
	}
	s.obs.put(res)
	s.stats.add(&s.stats.expired, 1)
	s.log.Warn("marked a peer's instance Lease expired: unchanged for its duration", "lease", il.Name, "holder", holderOf(il))
	return true, nil
}

// refresh gives the observer a fresh read of the Lease name, after a write
// made on its copy lost a race: the copy may be older than the watch has
// delivered yet, and judging it again would lose again.
func (s *Session) refresh(ctx context.Context, name string) error {
	cur, err := s.leases.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.obs.del(name)
	case err != nil:
		return err
	default:
		s.obs.put(cur)
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
func (s *Session) take(ctx context.Context, l *lease, job string, jl *coordv1.Lease) (*Term, error) {
	prev, err := tokenOf(jl)
	if err != nil {
		return nil, err
	}
	token := prev + 1
	obj := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.cfg.jobLease(job)}}
	if jl != nil {
		obj = jl.DeepCopy()
	}
	if obj.Labels == nil {
		obj.Labels = map[string]string{}
	}
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Labels[labelRole], obj.Labels[labelSet], obj.Labels[labelName] = roleJob, s.cfg.Prefix, job
	obj.Annotations[annToken] = strconv.FormatInt(token, 10)
	obj.Annotations[annInstance] = s.cfg.instanceLease(s.cfg.Instance)
	delete(obj.Annotations, annResign)
	now := metav1.NowMicro()
	secs := int32(s.cfg.TTL / time.Second)
	holder := l.holder
	transitions := int32(0)
	if jl != nil && jl.Spec.LeaseTransitions != nil {
		transitions = *jl.Spec.LeaseTransitions + 1
	}
	obj.Spec = coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now, LeaseTransitions: &transitions}

	rctx, cancel := context.WithTimeout(ctx, s.cfg.TTL)
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel)
	defer stop()
	var res *coordv1.Lease
	if jl == nil {
		res, err = s.leases.Create(rctx, obj, metav1.CreateOptions{})
	} else {
		res, err = s.leases.Update(rctx, obj, metav1.UpdateOptions{})
	}
	switch {
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
		return nil, s.refresh(ctx, obj.Name)
	case err != nil:
		return nil, err
	}
	s.obs.put(res)
	tlog := s.log.With("job", job, "token", token)
	if s.afterWin != nil {
		s.afterWin()
	}
	if !l.dl.Valid(s.now()) {
		// The write was answered after the instance Lease's deadline: the job
		// Lease names a gone holder, which peers take over from.
		tlog.Warn("won after the instance Lease's deadline; discarding the win")
		return nil, errors.New("won after the instance Lease's deadline")
	}
	return s.newTerm(l, job, token, res), nil
}
