package kubelease

import (
	"context"
	"fmt"
	"strconv"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
)

// RequestResign asks the term of job with token to resign: it sets the
// annotation jobs.snip.dev/resign-token on the job Lease (a merge patch;
// the holder's session sees it by watch).
func RequestResign(ctx context.Context, cli coordclient.LeasesGetter, namespace, prefix, job string, token int64) error {
	c := Config{Namespace: namespace, Prefix: prefix}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annResign, strconv.FormatInt(token, 10))
	_, err := cli.Leases(namespace).Patch(ctx, c.jobLease(job), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("kubelease: request resign of %s: %w", job, err)
	}
	return nil
}

// Resign asks job's leader to hand over, as leadership.RequestResign does on
// etcd: it reads the leader (ReadLeader; leadership.ErrNoLeader when there
// is none), requests that term's resignation (RequestResign), and waits
// until another term leads the job, or ctx ends: then after is nil with no
// error when nobody leads it (handed over, not taken yet), and an error
// when the same term still does. It returns the leader before and after.
func Resign(ctx context.Context, cli coordclient.LeasesGetter, namespace, prefix, job string) (before LeaseLeader, after *LeaseLeader, err error) {
	before, ok, err := ReadLeader(ctx, cli, namespace, prefix, job)
	if err != nil {
		return before, nil, err
	}
	if !ok {
		return before, nil, fmt.Errorf("resign %s: %w", job, leadership.ErrNoLeader)
	}
	if err := RequestResign(ctx, cli, namespace, prefix, job, before.Token); err != nil {
		return before, nil, err
	}
	for {
		l, ok, err := ReadLeader(ctx, cli, namespace, prefix, job)
		switch {
		case err != nil && ctx.Err() == nil:
			return before, nil, fmt.Errorf("resign %s: %w", job, err)
		case ok && l.Token != before.Token:
			return before, &l, nil
		}
		if !sleep.For(ctx, 50*time.Millisecond) {
			if !ok && err == nil {
				return before, nil, nil
			}
			return before, nil, fmt.Errorf("resign %s: the leader (%s, token %d) did not hand over: %w",
				job, before.Instance.Instance, before.Token, ctx.Err())
		}
	}
}

// WatchResignRequests calls f for each resign request (RequestResign) on a
// job Lease of the set: those pending when it starts (a request stays on the
// job Lease until its term resigns or a new term starts), then each new one
// seen by watch, until ctx ends. A broken watch is followed by a fresh list
// (after a quarter renew interval); an unreadable request is logged and
// ignored. The same request can be delivered twice (after a broken watch):
// f must be idempotent, as resigning is.
func (s *Session) WatchResignRequests(ctx context.Context, f func(job string, token int64)) {
	sel := s.cfg.selector(roleJob)
	for ctx.Err() == nil {
		list, err := s.leases.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			sleep.For(ctx, s.cfg.RenewInterval/4)
			continue
		}
		seen := map[string]string{}
		for i := range list.Items {
			s.resignRequest(&list.Items[i], seen, f)
		}
		w, err := s.leases.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			sleep.For(ctx, s.cfg.RenewInterval/4)
			continue
		}
		for ev := range w.ResultChan() {
			jl, ok := ev.Object.(*coordv1.Lease)
			if ev.Type == watch.Error || !ok {
				break
			}
			if ev.Type != watch.Deleted {
				s.resignRequest(jl, seen, f)
			}
		}
		w.Stop()
	}
}

// resignRequest calls f for jl's request unless it is the one last seen on jl.
func (s *Session) resignRequest(jl *coordv1.Lease, seen map[string]string, f func(job string, token int64)) {
	req := jl.Annotations[annResign]
	if req == "" || seen[jl.Name] == req {
		seen[jl.Name] = req
		return
	}
	seen[jl.Name] = req
	token, err := strconv.ParseInt(req, 10, 64)
	if err != nil {
		s.log.Warn("ignoring an unreadable resign request", "lease", jl.Name, "value", req)
		return
	}
	f(jl.Labels[labelName], token)
}
