package etcdlease

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
)

// WatchInstances calls f with the names of the instances that are up, sorted:
// once read, and again after each change, until ctx ends. It reads the
// registrations once and then follows a watch from that revision, so that it
// asks etcd nothing while nothing changes; a broken watch (compaction, a
// member without a leader) is followed by a fresh read, retried every renew
// interval (at least a second) while etcd does not answer.
func (st *store) WatchInstances(ctx context.Context, f func(names []string)) {
	cli, pfx := st.cfg.Client, layout.InstanceKey(st.cfg.Prefix, "")
	retry := max(time.Second, st.cfg.RenewInterval)
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

// ClusterLoad counts the terms each instance that is up leads, by instance
// name: two range reads in one round trip (a transaction), for a scheduler
// that spreads singletons over instances and reads it on the path of every
// hand-over. Leader keys of instances not registered are not counted.
func (st *store) ClusterLoad(ctx context.Context) (map[string]int, error) {
	instances, leaders := layout.InstanceKey(st.cfg.Prefix, ""), layout.LeaderKey(st.cfg.Prefix, "")
	resp, err := st.cfg.Client.Txn(ctx).Then(
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

// WatchResignRequests calls f for each request (Cluster.RequestResign) put
// since the session's first lease was granted, until ctx ends: from that
// revision, so that none put while the watch was being opened is missed. A
// broken watch is opened again after a second, from the revision after the
// last it saw (from then, if etcd has compacted it); an unreadable request
// is logged and ignored.
func (st *store) WatchResignRequests(ctx context.Context, f func(job string, token int64)) {
	pfx := layout.ResignKey(st.cfg.Prefix, "")
	next := st.opened.Load() + 1 // 1: no lease yet, watch from now
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if next > 1 {
			opts = append(opts, clientv3.WithRev(next))
		}
		for resp := range st.cfg.Client.Watch(ctx, pfx, opts...) {
			if resp.CompactRevision != 0 {
				st.log.Warn("resign requests: etcd compacted the revisions watched from; watching from now", "from", next)
				next = 1
				break
			}
			if resp.Header.Revision > 0 {
				next = resp.Header.Revision + 1
			}
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				name := strings.TrimPrefix(string(ev.Kv.Key), pfx)
				token, err := strconv.ParseInt(string(ev.Kv.Value), 10, 64)
				if err != nil {
					st.log.Warn("ignoring an unreadable resign request", "job", name, "value", string(ev.Kv.Value))
					continue
				}
				f(name, token)
			}
		}
		sleep.For(ctx, time.Second)
	}
}
