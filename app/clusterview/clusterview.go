// Package clusterview reads who leads which job and which instances are up
// from either leadership backend into package scheduler/status's model
// (status.LeadershipReader), so that status, the status page and
// `snip-jobs status` show both backends alike and scheduler/status imports
// neither. Reads only: no session, no lease of its own.
package clusterview

import (
	"context"
	"errors"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/scheduler/status"
)

// Etcd reads the leader keys and the instances' registrations under prefix,
// with what etcd says is left on each lease.
func Etcd(cli *clientv3.Client, prefix string) status.LeadershipReader {
	return func(ctx context.Context) (status.Leadership, error) {
		out := status.Leadership{Backend: "etcd"}
		c := etcdlease.NewCluster(cli, prefix)
		ls, lerr := c.Leaders(ctx)
		if lerr == nil {
			out.Leaders = map[string]status.Leader{}
		}
		for _, l := range ls {
			out.Leaders[l.Job] = status.Leader{Instance: l.Instance, Host: l.Host, PID: l.PID, Token: l.Token, Since: l.Since,
				Lease: strconv.FormatInt(int64(l.Lease), 16), LeaseTTLSeconds: l.LeaseTTL.Seconds()}
		}
		regs, ierr := c.InstanceLeases(ctx)
		for _, r := range regs {
			out.Instances = append(out.Instances, status.Instance{Name: r.Instance, Up: true, Host: r.Host, PID: r.PID,
				Started: r.Started, Lease: r.Lease, LeaseTTLSeconds: r.LeaseTTL.Seconds(),
				LeaseGrantedSeconds: r.LeaseGranted.Seconds()})
		}
		return out, errors.Join(lerr, ierr)
	}
}

// Kube reads the Leases of the set prefix in namespace, one List per read
// (kubelease.Cluster.ReadSet). Instances whose Lease is released are left out; Up is
// judged on now's wall clock (see status.Instance.Renewed).
func Kube(cli coordclient.LeasesGetter, namespace, prefix string, now func() time.Time) status.LeadershipReader {
	return func(ctx context.Context) (status.Leadership, error) {
		out := status.Leadership{Backend: "kubernetes"}
		set, err := kubelease.NewCluster(cli, namespace, prefix).ReadSet(ctx)
		if set == nil {
			return out, err
		}
		t := now()
		out.Leaders = map[string]status.Leader{}
		for _, l := range set.Leaders {
			out.Leaders[l.Job] = status.Leader{Instance: l.Instance.Instance, Host: l.Instance.Host, PID: l.Instance.PID,
				Token: l.Token, Since: l.Since, Lease: l.Instance.Lease, Holder: l.Instance.Holder, Renewed: l.Instance.Renewed}
		}
		for _, il := range set.Instances {
			if il.Holder == "" {
				continue
			}
			out.Instances = append(out.Instances, status.Instance{Name: il.Instance, Host: il.Host, PID: il.PID,
				Up:      !il.Leaving && !t.After(il.Renewed.Add(il.Duration)),
				Started: il.Started, Lease: il.Lease, LeaseGrantedSeconds: il.Duration.Seconds(),
				Holder: il.Holder, Renewed: il.Renewed})
		}
		return out, err
	}
}
