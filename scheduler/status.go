package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/scheduler/status"
)

// Status is this instance's own view of its jobs, without I/O: the term each
// holds and its last run here.
func (s *Scheduler) Status() []status.Job {
	out := make([]status.Job, 0, len(s.jobs))
	for _, j := range s.jobs {
		st := status.Describe(j.spec)
		j.mu.Lock()
		if t := j.term; t != nil && t.Valid() {
			st.Leading, st.Token, st.Since = true, t.Token(), t.Started()
			st.Headroom = max(0, time.Until(t.Deadline()))
		}
		if j.last != nil {
			last := *j.last
			st.LastRun = &last
		}
		j.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Leading is the number of terms this instance holds now.
func (s *Scheduler) Leading() int { return int(s.leading.Load()) }

// ResignKey is where an operator's request that job's leader resign is put.
func ResignKey(prefix, job string) string {
	return strings.TrimSuffix(prefix, "/") + "/resign/" + job
}

// ErrNoLeader is returned by RequestResign when the job has no leader.
var ErrNoLeader = errors.New("the job has no leader")

// RequestResign asks the current leader of job to hand over: it writes a
// request naming the leader's token, which the leader's scheduler watches, and
// waits until another term holds the job (or nobody, when no other instance is
// campaigning) or ctx ends. It returns the leader before and after.
func RequestResign(ctx context.Context, cli *clientv3.Client, prefix, job string) (before leadership.Leader, after *leadership.Leader, err error) {
	before, ok, err := leadership.Observe(ctx, cli, prefix, job)
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
		l, ok, err := leadership.Observe(ctx, cli, prefix, job)
		switch {
		case err != nil:
			return before, nil, fmt.Errorf("resign %s: %w", job, err)
		case ok && l.Token != before.Token:
			return before, &l, nil
		}
		select {
		case <-ctx.Done():
			if !ok {
				return before, nil, nil // handed over; nobody has taken it yet
			}
			return before, nil, fmt.Errorf("resign %s: the leader (%s, token %d) did not hand over: %w", job, before.Instance, before.Token, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
