package chaos

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
)

// termEvent is a leader key appearing (a term granted) or going (resigned,
// expired, revoked), as the harness's watch on etcd saw it. At is when the
// harness received it: precise to a few milliseconds while etcd is healthy,
// late after etcd lost quorum (the watch catches up when it returns).
type termEvent struct {
	Job      string
	Token    int64
	Instance string
	Start    bool // false: the key went
	Rev      int64
	At       time.Time
}

// leader is a job's current term as the observer last saw it.
type leader struct {
	Token    int64
	Instance string
	Since    time.Time
}

// observer keeps the log of term events a watch of the store reports
// (newObserver: etcd's leader keys; newKubeObserver: the job Leases), and
// every job's current term.
type observer struct {
	mu      sync.Mutex
	events  []termEvent
	current map[string]leader
	changed chan struct{} // closed and replaced on every event
	lastRev int64         // etcd: the revision of the newest event
}

func newEventLog() *observer {
	return &observer{current: map[string]leader{}, changed: make(chan struct{})}
}

// etcdWatch watches every leader key, directly on the etcd members (not
// through any instance's proxy), into an observer.
type etcdWatch struct {
	o      *observer
	cli    *clientv3.Client
	prefix string
}

func newObserver(ctx context.Context, cli *clientv3.Client, prefix string) (*observer, error) {
	o := newEventLog()
	w := &etcdWatch{o: o, cli: cli, prefix: layout.LeaderKey(prefix, "")}
	resp, err := cli.Get(ctx, w.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for _, kv := range resp.Kvs {
		o.apply(termEvent{Job: w.job(kv.Key), Token: kv.CreateRevision, Instance: instanceOf(kv.Value), Start: true, Rev: kv.ModRevision, At: now})
	}
	o.lastRev = resp.Header.Revision
	go w.watch(ctx)
	return o, nil
}

func (w *etcdWatch) job(key []byte) string { return strings.TrimPrefix(string(key), w.prefix) }

func instanceOf(v []byte) string {
	var rec etcdlease.LeaderRecord
	_ = json.Unmarshal(v, &rec)
	return rec.Instance
}

func (w *etcdWatch) watch(ctx context.Context) {
	o := w.o
	for ctx.Err() == nil {
		o.mu.Lock()
		from := o.lastRev + 1
		o.mu.Unlock()
		wch := w.cli.Watch(clientv3.WithRequireLeader(ctx), w.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV())
		for resp := range wch {
			now := time.Now()
			for _, ev := range resp.Events {
				switch ev.Type {
				case clientv3.EventTypePut:
					if ev.Kv.CreateRevision == ev.Kv.ModRevision {
						o.apply(termEvent{Job: w.job(ev.Kv.Key), Token: ev.Kv.CreateRevision, Instance: instanceOf(ev.Kv.Value), Start: true, Rev: ev.Kv.ModRevision, At: now})
					}
				case clientv3.EventTypeDelete:
					e := termEvent{Job: w.job(ev.Kv.Key), Rev: ev.Kv.ModRevision, At: now}
					if ev.PrevKv != nil {
						e.Token, e.Instance = ev.PrevKv.CreateRevision, instanceOf(ev.PrevKv.Value)
					}
					o.apply(e)
				}
			}
		}
		sleep.For(ctx, 50*time.Millisecond) // the watch ended (no leader, member gone): resume from where it was
	}
}

func (o *observer) apply(e termEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
	if e.Start {
		o.current[e.Job] = leader{Token: e.Token, Instance: e.Instance, Since: e.At}
	} else if cur, ok := o.current[e.Job]; ok && (e.Token == 0 || cur.Token == e.Token) {
		delete(o.current, e.Job)
	}
	if e.Rev > o.lastRev {
		o.lastRev = e.Rev
	}
	close(o.changed)
	o.changed = make(chan struct{})
}

// leaders returns the current leader of every job that has one.
func (o *observer) leaders() map[string]leader {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]leader, len(o.current))
	for j, l := range o.current {
		out[j] = l
	}
	return out
}

// log returns a copy of every event so far.
func (o *observer) log() []termEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]termEvent(nil), o.events...)
}

// waitFor waits until cond holds on the current leaders, ctx ends or bound
// passes; it reports whether cond held.
func (o *observer) waitFor(ctx context.Context, bound time.Duration, cond func(map[string]leader) bool) bool {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for {
		o.mu.Lock()
		ch := o.changed
		o.mu.Unlock()
		if cond(o.leaders()) {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-timer.C:
			return false
		}
	}
}

// firstStartAfter returns the first term of job granted after `after` whose
// token is not `not`.
func (o *observer) firstStartAfter(job string, after time.Time, not int64) (termEvent, bool) {
	for _, e := range o.log() {
		if e.Job == job && e.Start && e.Token != not && !e.At.Before(after) {
			return e, true
		}
	}
	return termEvent{}, false
}

// endOf returns when the key of job's term token was seen to go.
func (o *observer) endOf(job string, token int64) (termEvent, bool) {
	for _, e := range o.log() {
		if e.Job == job && !e.Start && e.Token == token {
			return e, true
		}
	}
	return termEvent{}, false
}
