package kubelease

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// InstanceLease is an instance Lease as one read sees it, for people
// (snip-jobs status, the status page): no session, no watch. A one-shot
// read cannot judge an instance gone the way peers do (seen unchanged for
// its duration on their own clock); it reports the Lease's wall-clock
// times as written, and the reader's judgement is only as good as the
// clocks of the two hosts agree.
type InstanceLease struct {
	Instance string // the instance's name (label jobs.snip.dev/name)
	Lease    string // the Lease's name
	// Holder is the incarnation that holds it, "" when released: closed,
	// or judged gone by the peer named in ExpiredBy.
	Holder    string
	ExpiredBy string
	Leaving   bool // marked by Deregister: its terms still run, it takes no more
	// Host and PID are what the incarnation wrote (annotations
	// jobs.snip.dev/host and jobs.snip.dev/pid; empty for older writers).
	Host string
	PID  int
	// Acquired and Renewed are acquireTime and renewTime: the instance's
	// wall clock when the incarnation took the Lease and at its last
	// renewal. Duration is leaseDurationSeconds.
	Acquired, Renewed time.Time
	Duration          time.Duration
}

// LeaseLeader is the holder of a job's term as one read sees it: the job
// Lease names an incarnation and that incarnation's instance Lease still
// names it. Whether that incarnation still renews is for the reader to
// judge from Instance.Renewed: a crashed holder's Leases stay as they were
// until a peer campaigns for the job.
type LeaseLeader struct {
	Job      string
	Token    int64
	Since    time.Time // the job Lease's acquireTime: the winner's wall clock when it won
	Instance InstanceLease
}

// LeaseSet is what ReadSet read.
type LeaseSet struct {
	Leaders   []LeaseLeader   // by job
	Instances []InstanceLease // by instance name, released ones included
}

// ReadSet reads the Leases of the set prefix in namespace with one List:
// the instance Leases and the leader of every job Lease whose holder's
// instance Lease still names it. It is nil when the List failed. A job
// Lease that cannot be read (an unreadable token) is left out and named in
// the error, with the rest returned.
func ReadSet(ctx context.Context, cli coordclient.LeasesGetter, namespace, prefix string) (*LeaseSet, error) {
	c := Config{Namespace: namespace, Prefix: prefix}
	list, err := cli.Leases(namespace).List(ctx, metav1.ListOptions{LabelSelector: c.setSelector()})
	if err != nil {
		return nil, fmt.Errorf("kubelease: list the Leases of set %s in namespace %s: %w", prefix, namespace, err)
	}
	byLease := map[string]InstanceLease{}
	var instances []InstanceLease
	for i := range list.Items {
		if l := &list.Items[i]; l.Labels[labelRole] == roleInstance {
			il := instanceLeaseOf(l)
			byLease[l.Name] = il
			instances = append(instances, il)
		}
	}
	var leaders []LeaseLeader
	var errs []error
	for i := range list.Items {
		if l := &list.Items[i]; l.Labels[labelRole] == roleJob {
			ld, ok, err := leaderOf(l, byLease[l.Annotations[annInstance]])
			if err != nil {
				errs = append(errs, err)
			} else if ok {
				leaders = append(leaders, ld)
			}
		}
	}
	sort.Slice(instances, func(i, j int) bool { return instances[i].Instance < instances[j].Instance })
	sort.Slice(leaders, func(i, j int) bool { return leaders[i].Job < leaders[j].Job })
	return &LeaseSet{Leaders: leaders, Instances: instances}, errors.Join(errs...)
}

// ReadLeader reads job's leader: its job Lease and the instance Lease that
// names; ok is false when nobody leads it.
func ReadLeader(ctx context.Context, cli coordclient.LeasesGetter, namespace, prefix, job string) (_ LeaseLeader, ok bool, _ error) {
	c := Config{Namespace: namespace, Prefix: prefix}
	leases := cli.Leases(namespace)
	jl, err := leases.Get(ctx, c.jobLease(job), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return LeaseLeader{}, false, nil
	case err != nil:
		return LeaseLeader{}, false, fmt.Errorf("kubelease: read the job Lease of %s in namespace %s: %w", job, namespace, err)
	case holderOf(jl) == "" || jl.Annotations[annInstance] == "":
		return LeaseLeader{}, false, nil
	}
	il, err := leases.Get(ctx, jl.Annotations[annInstance], metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return LeaseLeader{}, false, nil
	case err != nil:
		return LeaseLeader{}, false, fmt.Errorf("kubelease: read the instance Lease of %s's leader in namespace %s: %w", job, namespace, err)
	}
	return leaderOf(jl, instanceLeaseOf(il))
}

// leaderOf is jl's leader when il, its instance Lease, names the same holder.
func leaderOf(jl *coordv1.Lease, il InstanceLease) (LeaseLeader, bool, error) {
	holder := holderOf(jl)
	if holder == "" || il.Holder != holder {
		return LeaseLeader{}, false, nil
	}
	token, err := tokenOf(jl)
	if err != nil {
		return LeaseLeader{}, false, fmt.Errorf("kubelease: %w", err)
	}
	ld := LeaseLeader{Job: jl.Labels[labelName], Token: token, Instance: il}
	if jl.Spec.AcquireTime != nil {
		ld.Since = jl.Spec.AcquireTime.Time
	}
	return ld, true, nil
}

func instanceLeaseOf(l *coordv1.Lease) InstanceLease {
	il := InstanceLease{
		Instance: l.Labels[labelName], Lease: l.Name, Holder: holderOf(l),
		ExpiredBy: l.Annotations[annExpiredBy], Leaving: l.Annotations[annLeaving] != "",
		Host: l.Annotations[annHost],
	}
	il.PID, _ = strconv.Atoi(l.Annotations[annPID]) // for people: unreadable is unknown
	if t := l.Spec.AcquireTime; t != nil {
		il.Acquired = t.Time
	}
	if t := l.Spec.RenewTime; t != nil {
		il.Renewed = t.Time
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil {
		il.Duration = time.Duration(*d) * time.Second
	}
	return il
}
