package kubelease

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/snip/snip-jobs/leadership"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// Started is when its process started, as it wrote it (for people).
	Started time.Time
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

// ReadSet reads the Leases of the set with one List:
// the instance Leases and the leader of every job Lease whose holder's
// instance Lease still names it. It is nil when the List failed. A job
// Lease that cannot be read (an unreadable token) is left out and named in
// the error, with the rest returned.
func (c *Cluster) ReadSet(ctx context.Context) (*LeaseSet, error) {
	list, err := c.leases.List(ctx, metav1.ListOptions{LabelSelector: c.cfg.setSelector()})
	if err != nil {
		return nil, fmt.Errorf("kubelease: list the Leases of set %s in namespace %s: %w", c.cfg.Prefix, c.cfg.Namespace, err)
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
func (c *Cluster) ReadLeader(ctx context.Context, job string) (_ LeaseLeader, ok bool, _ error) {
	namespace, leases := c.cfg.Namespace, c.leases
	jl, err := leases.Get(ctx, c.cfg.jobLease(job), metav1.GetOptions{})
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
	il.Started = startedOf(l)
	if t := l.Spec.RenewTime; t != nil {
		il.Renewed = t.Time
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil {
		il.Duration = time.Duration(*d) * time.Second
	}
	return il
}

// Cluster reads and asks the API server what an operator's command needs,
// with no session of its own: one read sees what a peer's watch would, but
// cannot judge a holder gone the way peers do (see InstanceLease).
type Cluster struct {
	cfg    Config
	leases coordclient.LeaseInterface
}

// NewCluster is the set prefix in namespace, through cli.
func NewCluster(cli coordclient.LeasesGetter, namespace, prefix string) *Cluster {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Cluster{cfg: Config{Namespace: namespace, Prefix: prefix}, leases: cli.Leases(namespace)}
}

var _ leadership.Cluster = (*Cluster)(nil)

// Leader reads job's leader (ReadLeader).
func (c *Cluster) Leader(ctx context.Context, job string) (leadership.Leader, bool, error) {
	ld, ok, err := c.ReadLeader(ctx, job)
	if !ok || err != nil {
		return leadership.Leader{}, false, err
	}
	return leadership.Leader{Job: ld.Job, Instance: ld.Instance.Instance, Host: ld.Instance.Host, PID: ld.Instance.PID,
		Token: ld.Token, Since: ld.Since}, true, nil
}

// RequestResign sets the annotation jobs.snip.dev/resign-token on the job
// Lease (a merge patch); the holder's session sees it by watch, and the
// request stays until its term resigns or a new term starts.
func (c *Cluster) RequestResign(ctx context.Context, job string, token int64) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annResign, strconv.FormatInt(token, 10))
	_, err := c.leases.Patch(ctx, c.cfg.jobLease(job), types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("kubelease: request resign of %s: %w", job, err)
	}
	return nil
}

// TakeOver releases job's Lease as a resignation does (holder cleared, token
// kept) if it still records the term with token, under the resourceVersion
// read, and annotates the takeover in the same update, so that the holder's
// session can tell it from any other loss of the Lease.
func (c *Cluster) TakeOver(ctx context.Context, job string, token int64, by string) (bool, error) {
	name := c.cfg.jobLease(job)
	for range 5 {
		jl, err := c.leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("kubelease: take over %s (token %d): %w", job, token, err)
		}
		if tok, err := tokenOf(jl); err != nil || tok != token || holderOf(jl) == "" {
			return false, nil
		}
		jl.Spec.HolderIdentity = nil
		delete(jl.Annotations, annResign)
		jl.Annotations[annTakenOver], jl.Annotations[annTakenBy] = strconv.FormatInt(token, 10), by
		_, err = c.leases.Update(ctx, jl, metav1.UpdateOptions{})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err):
			return false, fmt.Errorf("kubelease: take over %s (token %d): %w", job, token, err)
		}
	}
	return false, fmt.Errorf("kubelease: job Lease %s keeps changing", name)
}

// Registration reads instance's Lease: the process of the incarnation that
// holds it (its annotations), ok false when it is absent or released.
func (c *Cluster) Registration(ctx context.Context, instance string) (leadership.Registration, bool, error) {
	il, err := c.leases.Get(ctx, c.cfg.instanceLease(instance), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return leadership.Registration{}, false, nil
	case err != nil:
		return leadership.Registration{}, false, fmt.Errorf("kubelease: read the instance Lease of %s in namespace %s: %w", instance, c.cfg.Namespace, err)
	case holderOf(il) == "":
		return leadership.Registration{}, false, nil
	}
	return registrationOf(il), true, nil
}

// Revoke deletes instance's Lease while it still names reg's incarnation, under
// the resourceVersion read (a precondition): every job Lease naming that
// incarnation can then be taken at once. Once another incarnation holds it,
// or nobody does, there is nothing to end.
func (c *Cluster) Revoke(ctx context.Context, reg leadership.Registration) error {
	name := c.cfg.instanceLease(reg.Instance)
	for range 5 {
		il, err := c.leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case holderOf(il) != reg.Lease:
			return nil
		}
		rv := il.ResourceVersion
		err = c.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("kubelease: instance Lease %s keeps changing", name)
}

// FreshToken bumps the job Lease's token under the resourceVersion read
// (creating the job Lease, released, when absent): the count's next value is
// the operator's, so that every later term's is larger. The term that held
// the old value sees its job Lease record a later token and ends; its
// holder's session wins again with the next one.
func (c *Cluster) FreshToken(ctx context.Context, job string) (int64, error) {
	name := c.cfg.jobLease(job)
	for range 5 {
		jl, err := c.leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("kubelease: fresh token for %s: %w", job, err)
		}
		if apierrors.IsNotFound(err) {
			jl = nil
		}
		prev, err := tokenOf(jl)
		if err != nil {
			return 0, err
		}
		obj := jobObject(c.cfg, job, jl)
		obj.Annotations[annToken] = strconv.FormatInt(prev+1, 10)
		if jl == nil {
			_, err = c.leases.Create(ctx, obj, metav1.CreateOptions{})
		} else {
			_, err = c.leases.Update(ctx, obj, metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			return prev + 1, nil
		case !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err):
			return 0, fmt.Errorf("kubelease: fresh token for %s: %w", job, err)
		}
	}
	return 0, fmt.Errorf("kubelease: fresh token for %s: the job Lease keeps changing", job)
}
