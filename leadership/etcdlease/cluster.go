package etcdlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
)

// Cluster reads and asks etcd what an operator's command needs, with no
// session of its own: it needs only a client, so `snip-jobs status` and
// `resign` work from any machine that reaches etcd.
type Cluster struct {
	cli    *clientv3.Client
	prefix string
}

// NewCluster is the cluster under prefix, through cli.
func NewCluster(cli *clientv3.Client, prefix string) *Cluster {
	return &Cluster{cli: cli, prefix: layout.Prefix(prefix)}
}

var _ leadership.Cluster = (*Cluster)(nil)

// Leader is a job's leader key as etcd holds it.
type Leader struct {
	leadership.Leader
	Lease clientv3.LeaseID
	// LeaseTTL is the time etcd says is left on the leader's lease (its TTL while
	// the leader keeps renewing; counts down once it stops).
	LeaseTTL time.Duration
}

// Leader reads job's leader key.
func (c *Cluster) Leader(ctx context.Context, job string) (leadership.Leader, bool, error) {
	l, ok, err := c.LeaderKey(ctx, job)
	return l.Leader, ok, err
}

// LeaderKey reads job's leader key, with the lease it is on (not its TTL).
func (c *Cluster) LeaderKey(ctx context.Context, job string) (Leader, bool, error) {
	resp, err := c.cli.Get(ctx, layout.LeaderKey(c.prefix, job))
	if err != nil {
		return Leader{}, false, fmt.Errorf("leadership: observe %s: %w", job, err)
	}
	if len(resp.Kvs) == 0 {
		return Leader{}, false, nil
	}
	return c.leaderOf(resp.Kvs[0]), true, nil
}

func (c *Cluster) leaderOf(kv *mvccpb.KeyValue) Leader {
	var rec LeaderRecord
	_ = json.Unmarshal(kv.Value, &rec) // an unreadable value still names a token and a lease
	return Leader{
		Leader: leadership.Leader{
			Job:      strings.TrimPrefix(string(kv.Key), layout.LeaderKey(c.prefix, "")),
			Instance: rec.Instance, Host: rec.Host, PID: rec.PID, Since: rec.Since, Token: kv.CreateRevision,
		},
		Lease: clientv3.LeaseID(kv.Lease),
	}
}

// Leaders returns the current leader of every job that has one, by job name,
// with what etcd says is left on each lease: for status, not for loops.
func (c *Cluster) Leaders(ctx context.Context) ([]Leader, error) {
	resp, err := c.cli.Get(ctx, layout.LeaderKey(c.prefix, ""), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("leadership: list leaders: %w", err)
	}
	ttls := map[clientv3.LeaseID]time.Duration{}
	var out []Leader
	for _, kv := range resp.Kvs {
		l := c.leaderOf(kv)
		ttl, seen := ttls[l.Lease]
		if !seen && l.Lease != 0 {
			r, err := c.cli.TimeToLive(ctx, l.Lease)
			if err != nil {
				return nil, fmt.Errorf("leadership: lease of %s: %w", l.Job, err)
			}
			ttl = time.Duration(max(r.TTL, 0)) * time.Second
			ttls[l.Lease] = ttl
		}
		l.LeaseTTL = ttl
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Job < out[j].Job })
	return out, nil
}

// Instances returns the registrations of the instances that are up, by name.
func (c *Cluster) Instances(ctx context.Context) ([]leadership.Registration, error) {
	pfx := layout.InstanceKey(c.prefix, "")
	resp, err := c.cli.Get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("leadership: list instances: %w", err)
	}
	out := make([]leadership.Registration, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r record
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			r.Instance = strings.TrimPrefix(string(kv.Key), pfx)
		}
		out = append(out, r.registration())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, nil
}

// InstanceLease is an instance that is up, with what etcd says of its lease:
// the time left (about the TTL while the instance renews it; counting down
// once it stopped: killed, paused, cut off from etcd) and the TTL granted.
type InstanceLease struct {
	leadership.Registration
	LeaseTTL, LeaseGranted time.Duration
}

// InstanceLeases is Instances with each instance's lease, one TimeToLive per
// instance: for status output, not for loops. An instance whose lease could
// not be read is returned without it, and the error says which.
func (c *Cluster) InstanceLeases(ctx context.Context) ([]InstanceLease, error) {
	regs, err := c.Instances(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]InstanceLease, len(regs))
	var errs []error
	for i, r := range regs {
		out[i].Registration = r
		id, _ := strconv.ParseInt(r.Lease, 16, 64)
		ttl, err := c.cli.TimeToLive(ctx, clientv3.LeaseID(id))
		if err != nil {
			errs = append(errs, fmt.Errorf("leadership: lease of instance %s: %w", r.Instance, err))
			continue
		}
		out[i].LeaseTTL = time.Duration(max(ttl.TTL, 0)) * time.Second
		out[i].LeaseGranted = time.Duration(ttl.GrantedTTL) * time.Second
	}
	return out, errors.Join(errs...)
}

// RequestResign puts a request naming token under <prefix>/resign/<job>, on
// a lease of a minute so that it cleans itself up; the leader's session
// watches these keys.
func (c *Cluster) RequestResign(ctx context.Context, job string, token int64) error {
	lease, err := c.cli.Grant(ctx, 60)
	if err != nil {
		return err
	}
	_, err = c.cli.Put(ctx, layout.ResignKey(c.prefix, job), strconv.FormatInt(token, 10), clientv3.WithLease(lease.ID))
	return err
}

// takeover is the value of a job's takeover record: the term taken over
// and who took it.
type takeover struct {
	Token int64  `json:"token"`
	By    string `json:"by"`
}

// TakeOver deletes job's leader key if its create revision is token, and
// records the takeover beside it in the same transaction, so that the
// holder's watch can tell it from any other loss of the key.
func (c *Cluster) TakeOver(ctx context.Context, job string, token int64, by string) (bool, error) {
	key := layout.LeaderKey(c.prefix, job)
	mark, err := json.Marshal(takeover{Token: token, By: by})
	if err != nil {
		return false, err
	}
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", token)).
		Then(clientv3.OpDelete(key), clientv3.OpPut(layout.TakeoverKey(c.prefix, job), string(mark))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("leadership: take over %s (token %d): %w", job, token, err)
	}
	return resp.Succeeded, nil
}

// Registration reads instance's registration key.
func (c *Cluster) Registration(ctx context.Context, instance string) (leadership.Registration, bool, error) {
	key := layout.InstanceKey(c.prefix, instance)
	resp, err := c.cli.Get(ctx, key)
	if err != nil {
		return leadership.Registration{}, false, fmt.Errorf("leadership: read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return leadership.Registration{}, false, nil
	}
	var r record
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return leadership.Registration{}, false, fmt.Errorf("leadership: unreadable registration at %s: %w", key, err)
	}
	reg := r.registration()
	reg.Lease = leaseID(clientv3.LeaseID(resp.Kvs[0].Lease)) // the lease it sits on, whatever it says
	return reg, true, nil
}

// Revoke revokes the lease reg sits on. The process wrote its own
// registration on its own lease, so that lease is the dead process's; a
// later process of the instance registers on a lease of its own.
func (c *Cluster) Revoke(ctx context.Context, reg leadership.Registration) error {
	id, err := strconv.ParseInt(reg.Lease, 16, 64)
	if err != nil || id == 0 {
		return fmt.Errorf("the registration of %s names no lease (%q)", reg.Instance, reg.Lease)
	}
	if _, err := c.cli.Revoke(ctx, clientv3.LeaseID(id)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return err
	}
	return nil
}

// FreshToken is the revision of a write made now: etcd revisions are global
// and only grow, and a term's token is its key's creation revision, so it is
// larger than every term's so far and smaller than every later one's.
func (c *Cluster) FreshToken(ctx context.Context, job string) (int64, error) {
	resp, err := c.cli.Put(ctx, layout.OperatorTokenKey(c.prefix), time.Now().UTC().Format(time.RFC3339Nano))
	if err != nil {
		return 0, fmt.Errorf("leadership: fresh token: %w", err)
	}
	return resp.Header.Revision, nil
}
