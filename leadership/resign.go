package leadership

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/sleep"
)

// Resign requests: an operator (snip-jobs resign, the dev cluster's button)
// asks the leader of a job to hand it over by putting the leader's token under
// <prefix>/resign/<job>, on a short lease; the leader's scheduler watches
// these keys (Session.WatchResignRequests) and ends that term if it still
// holds it. Naming the token keeps a request from ending a later term.

// ResignKey is where an operator's request that job's leader resign is put.
func ResignKey(prefix, job string) string {
	return prefixOrDefault(prefix) + "/resign/" + job
}

// ErrNoLeader is returned by RequestResign when the job has no leader.
var ErrNoLeader = errors.New("the job has no leader")

// RequestResign asks the current leader of job to hand over: it writes a
// request naming the leader's token, which the leader's scheduler watches, and
// waits until another term holds the job (or nobody, when no other instance is
// campaigning) or ctx ends. It returns the leader before and after.
func RequestResign(ctx context.Context, cli *clientv3.Client, prefix, job string) (before Leader, after *Leader, err error) {
	before, ok, err := Observe(ctx, cli, prefix, job)
	if err != nil {
		return before, nil, err
	}
	if !ok {
		return before, nil, fmt.Errorf("resign %s: %w", job, ErrNoLeader)
	}
	lease, err := cli.Grant(ctx, 60) // the request cleans itself up
	if err != nil {
		return before, nil, fmt.Errorf("resign %s: %w", job, err)
	}
	key := ResignKey(prefix, job)
	if _, err := cli.Put(ctx, key, strconv.FormatInt(before.Token, 10), clientv3.WithLease(lease.ID)); err != nil {
		return before, nil, fmt.Errorf("resign %s: %w", job, err)
	}
	defer cli.Revoke(context.WithoutCancel(ctx), lease.ID)
	for {
		l, ok, err := Observe(ctx, cli, prefix, job)
		switch {
		case err != nil:
			return before, nil, fmt.Errorf("resign %s: %w", job, err)
		case ok && l.Token != before.Token:
			return before, &l, nil
		}
		if !sleep.For(ctx, 50*time.Millisecond) {
			if !ok {
				return before, nil, nil // handed over; nobody has taken it yet
			}
			return before, nil, fmt.Errorf("resign %s: the leader (%s, token %d) did not hand over: %w", job, before.Instance, before.Token, ctx.Err())
		}
	}
}

// WatchResignRequests calls f for each request (RequestResign) that the term
// of job with token resign, put while it watches, until ctx ends. A broken
// watch is opened again after a second; an unreadable request is logged and
// ignored.
func (s *Session) WatchResignRequests(ctx context.Context, f func(job string, token int64)) {
	pfx := ResignKey(s.cfg.Prefix, "")
	for ctx.Err() == nil {
		for resp := range s.cfg.Client.Watch(ctx, pfx, clientv3.WithPrefix()) {
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				name := strings.TrimPrefix(string(ev.Kv.Key), pfx)
				token, err := strconv.ParseInt(string(ev.Kv.Value), 10, 64)
				if err != nil {
					s.log.Warn("ignoring an unreadable resign request", "job", name, "value", string(ev.Kv.Value))
					continue
				}
				f(name, token)
			}
		}
		sleep.For(ctx, time.Second)
	}
}
