package leadership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/sleep"
)

// Leader describes the current holder of a job's leader key, as etcd sees it.
type Leader struct {
	Job      string
	Instance string
	Host     string
	PID      int
	Token    int64
	Since    time.Time // wall clock of the winner's host when it won
	Lease    clientv3.LeaseID
	// LeaseTTL is the time etcd says is left on the leader's lease (its TTL while
	// the leader keeps renewing; counts down once it stops).
	LeaseTTL time.Duration
}

// Observe returns the current leader of job, or ok=false when there is none.
// It needs only an etcd client: `snip-jobs status` uses it from any machine.
func Observe(ctx context.Context, cli *clientv3.Client, prefix, job string) (l Leader, ok bool, err error) {
	resp, err := cli.Get(ctx, LeaderKey(prefix, job))
	if err != nil {
		return Leader{}, false, fmt.Errorf("leadership: observe %s: %w", job, err)
	}
	if len(resp.Kvs) == 0 {
		return Leader{}, false, nil
	}
	ls, err := leadersFrom(ctx, cli, prefix, resp)
	if err != nil {
		return Leader{}, false, err
	}
	return ls[0], true, nil
}

// Leaders returns the current leader of every job that has one, by job name.
func Leaders(ctx context.Context, cli *clientv3.Client, prefix string) ([]Leader, error) {
	resp, err := cli.Get(ctx, LeaderKey(prefix, ""), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("leadership: list leaders: %w", err)
	}
	return leadersFrom(ctx, cli, prefix, resp)
}

func leadersFrom(ctx context.Context, cli *clientv3.Client, prefix string, resp *clientv3.GetResponse) ([]Leader, error) {
	ttls := map[int64]time.Duration{}
	var out []Leader
	for _, kv := range resp.Kvs {
		var rec LeaderRecord
		_ = json.Unmarshal(kv.Value, &rec) // an unreadable value still names a token and a lease
		l := Leader{
			Job:      strings.TrimPrefix(string(kv.Key), LeaderKey(prefix, "")),
			Instance: rec.Instance, Host: rec.Host, PID: rec.PID, Since: rec.Since,
			Token: kv.CreateRevision, Lease: clientv3.LeaseID(kv.Lease),
		}
		ttl, seen := ttls[kv.Lease]
		if !seen && kv.Lease != 0 {
			r, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				return nil, fmt.Errorf("leadership: lease of %s: %w", l.Job, err)
			}
			ttl = time.Duration(max(r.TTL, 0)) * time.Second
			ttls[kv.Lease] = ttl
		}
		l.LeaseTTL = ttl
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Job < out[j].Job })
	return out, nil
}

// Instances returns the registrations of the instances that are up, by name.
func Instances(ctx context.Context, cli *clientv3.Client, prefix string) ([]Registration, error) {
	resp, err := cli.Get(ctx, InstanceKey(prefix, ""), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("leadership: list instances: %w", err)
	}
	out := make([]Registration, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r Registration
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			r.Instance = strings.TrimPrefix(string(kv.Key), InstanceKey(prefix, ""))
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, nil
}

// WatchInstances calls f with the names of the instances that are up, sorted:
// once read, and again after each change, until ctx ends. It reads the
// registrations once and then follows a watch from that revision, so that it
// asks etcd nothing while nothing changes; a broken watch (compaction, a
// member without a leader) is followed by a fresh read, retried every retry
// while etcd does not answer.
func WatchInstances(ctx context.Context, cli *clientv3.Client, prefix string, retry time.Duration, f func(names []string)) {
	pfx := InstanceKey(prefix, "")
	for ctx.Err() == nil {
		resp, err := cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			sleep.For(ctx, retry)
			continue
		}
		up := map[string]bool{}
		for _, kv := range resp.Kvs {
			up[strings.TrimPrefix(string(kv.Key), pfx)] = true
		}
		f(sortedKeys(up))
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				name := strings.TrimPrefix(string(ev.Kv.Key), pfx)
				up[name] = ev.Type == clientv3.EventTypePut
				if !up[name] {
					delete(up, name)
				}
			}
			if len(wr.Events) > 0 {
				f(sortedKeys(up))
			}
		}
		cancel()
		sleep.For(ctx, retry)
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// WatchInstances calls f with the names of the instances that are up, sorted,
// at once and after each change, until ctx ends (package-level
// WatchInstances on the session's client and prefix, retried every renew
// interval, at least a second, while etcd does not answer).
func (s *Session) WatchInstances(ctx context.Context, f func(names []string)) {
	WatchInstances(ctx, s.cfg.Client, s.cfg.Prefix, max(time.Second, s.cfg.RenewInterval), f)
}

// ClusterLoad counts the terms each instance that is up leads, by instance
// name: two range reads in one round trip (a transaction), for a scheduler
// that spreads singletons over instances and reads it on the path of every
// hand-over. Leader keys of instances not registered are not counted.
func (s *Session) ClusterLoad(ctx context.Context) (map[string]int, error) {
	instances, leaders := InstanceKey(s.cfg.Prefix, ""), LeaderKey(s.cfg.Prefix, "")
	resp, err := s.cfg.Client.Txn(ctx).Then(
		clientv3.OpGet(instances, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(leaders, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("leadership: cluster load: %w", err)
	}
	load := map[string]int{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		load[strings.TrimPrefix(string(kv.Key), instances)] = 0
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		var rec LeaderRecord
		if json.Unmarshal(kv.Value, &rec) == nil {
			if _, up := load[rec.Instance]; up {
				load[rec.Instance]++
			}
		}
	}
	return load, nil
}

// InstanceLease is an instance that is up, with what etcd says of its lease:
// the time left (about the TTL while the instance renews it; counting down
// once it stopped: killed, paused, cut off from etcd) and the TTL granted.
type InstanceLease struct {
	Registration
	LeaseTTL, LeaseGranted time.Duration
}

// InstanceLeases is Instances with each instance's lease, one TimeToLive per
// instance: for status output, not for loops. An instance whose lease could
// not be read is returned without it, and the error says which.
func InstanceLeases(ctx context.Context, cli *clientv3.Client, prefix string) ([]InstanceLease, error) {
	regs, err := Instances(ctx, cli, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]InstanceLease, len(regs))
	var errs []error
	for i, r := range regs {
		out[i].Registration = r
		ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(r.Lease))
		if err != nil {
			errs = append(errs, fmt.Errorf("leadership: lease of instance %s: %w", r.Instance, err))
			continue
		}
		out[i].LeaseTTL = time.Duration(max(ttl.TTL, 0)) * time.Second
		out[i].LeaseGranted = time.Duration(ttl.GrantedTTL) * time.Second
	}
	return out, errors.Join(errs...)
}

// FreshToken returns a fencing token larger than that of every term granted so
// far: the revision of a write made now (etcd revisions are global and only
// grow, and a term's token is its key's creation revision). It is for an
// operator's one-off fenced write (rebuilding a report): the write refuses the
// current leader's later writes to the same resource, so that leader hands
// over and wins again with a newer token.
func FreshToken(ctx context.Context, cli *clientv3.Client, prefix string) (int64, error) {
	resp, err := cli.Put(ctx, prefixOrDefault(prefix)+"/operator-token", time.Now().UTC().Format(time.RFC3339Nano))
	if err != nil {
		return 0, fmt.Errorf("leadership: fresh token: %w", err)
	}
	return resp.Header.Revision, nil
}
