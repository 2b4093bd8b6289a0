package kubelease

import (
	"context"
	"strconv"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/snip/snip-jobs/internal/sleep"
)

// WatchResignRequests calls f for each resign request (Cluster.RequestResign) on a
// job Lease of the set: those pending when it starts (a request stays on the
// job Lease until its term resigns or a new term starts), then each new one
// seen by watch, until ctx ends. A broken watch is followed by a fresh list
// (after a quarter renew interval); an unreadable request is logged and
// ignored. The same request can be delivered twice (after a broken watch):
// f must be idempotent, as resigning is.
func (st *store) WatchResignRequests(ctx context.Context, f func(job string, token int64)) {
	sel := st.cfg.selector(roleJob)
	for ctx.Err() == nil {
		list, err := st.leases.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			sleep.For(ctx, st.cfg.RenewInterval/4)
			continue
		}
		seen := map[string]string{}
		for i := range list.Items {
			st.resignRequest(&list.Items[i], seen, f)
		}
		w, err := st.leases.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			sleep.For(ctx, st.cfg.RenewInterval/4)
			continue
		}
		for ev := range w.ResultChan() {
			jl, ok := ev.Object.(*coordv1.Lease)
			if ev.Type == watch.Error || !ok {
				break
			}
			if ev.Type != watch.Deleted {
				st.resignRequest(jl, seen, f)
			}
		}
		w.Stop()
	}
}

// resignRequest calls f for jl's request unless it is the one last seen on jl.
func (st *store) resignRequest(jl *coordv1.Lease, seen map[string]string, f func(job string, token int64)) {
	req := jl.Annotations[annResign]
	if req == "" || seen[jl.Name] == req {
		seen[jl.Name] = req
		return
	}
	seen[jl.Name] = req
	token, err := strconv.ParseInt(req, 10, 64)
	if err != nil {
		st.log.Warn("ignoring an unreadable resign request", "lease", jl.Name, "value", req)
		return
	}
	f(jl.Labels[labelName], token)
}
