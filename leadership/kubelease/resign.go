package kubelease

import (
	"context"
	"fmt"
	"strconv"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/snip/snip-jobs/internal/sleep"
)

// RequestResign asks the term of job with token to resign: it sets the
// annotation jobs.snip.dev/resign-token on the job Lease (a merge patch;
// the holder's session sees it by watch).
func RequestResign(ctx context.Context, cli kubernetes.Interface, namespace, prefix, job string, token int64) error {
	c := Config{Namespace: namespace, Prefix: prefix}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annResign, strconv.FormatInt(token, 10))
	_, err := cli.CoordinationV1().Leases(namespace).Patch(ctx, c.jobLease(job), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("kubelease: request resign of %s: %w", job, err)
	}
	return nil
}

// WatchResignRequests calls f for each resign request (RequestResign) seen
// on a job Lease of the set while it watches, until ctx ends. A broken
// watch is opened again (after a quarter renew interval); an unreadable
// request is logged and ignored.
func (s *Session) WatchResignRequests(ctx context.Context, f func(job string, token int64)) {
	sel := s.cfg.selector(roleJob)
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			list, err := s.leases.List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
			if err != nil {
				sleep.For(ctx, s.cfg.RenewInterval/4)
				continue
			}
			rv = list.ResourceVersion // requests from now on, as leadership's
		}
		w, err := s.leases.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv})
		if err != nil {
			rv = ""
			sleep.For(ctx, s.cfg.RenewInterval/4)
			continue
		}
		seen := map[string]string{}
		for ev := range w.ResultChan() {
			jl, ok := ev.Object.(*coordv1.Lease)
			if ev.Type == watch.Error || !ok {
				rv = ""
				break
			}
			rv = jl.ResourceVersion
			req := jl.Annotations[annResign]
			if ev.Type == watch.Deleted || req == "" || seen[jl.Name] == req {
				continue
			}
			seen[jl.Name] = req
			token, err := strconv.ParseInt(req, 10, 64)
			if err != nil {
				s.log.Warn("ignoring an unreadable resign request", "lease", jl.Name, "value", req)
				continue
			}
			f(jl.Labels[labelName], token)
		}
		w.Stop()
	}
}
