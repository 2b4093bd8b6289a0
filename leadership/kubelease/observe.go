package kubelease

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/snip/snip-jobs/internal/sleep"
)

// observer follows the instance Leases of the set by list and watch, and
// remembers when this session first saw each version of each (seenAt, on
// its monotonic clock). seenAt is never earlier than the version's write,
// and so never earlier than the send time of the renewal that wrote it: a
// wait of the Lease's duration from seenAt outlasts its holder's deadline.
// A version seen late (a slow or broken watch) only makes the wait longer.
type observer struct {
	s  *Session
	mu sync.Mutex
	m  map[string]seen
	n  notifier
}

type seen struct {
	lease  *coordv1.Lease
	seenAt int64
}

func newObserver(s *Session) *observer { return &observer{s: s, m: map[string]seen{}} }

// run lists and then watches until ctx ends; a broken watch is followed by a
// fresh list (retried at a quarter of the renew interval while the API
// server does not answer).
func (o *observer) run(ctx context.Context) {
	sel := o.s.cfg.selector(roleInstance)
	for ctx.Err() == nil {
		list, err := o.s.leases.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			sleep.For(ctx, o.s.cfg.RenewInterval/4)
			continue
		}
		o.replace(list.Items)
		w, err := o.s.leases.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			sleep.For(ctx, o.s.cfg.RenewInterval/4)
			continue
		}
		o.follow(w)
		w.Stop()
	}
}

func (o *observer) follow(w watch.Interface) {
	for ev := range w.ResultChan() {
		l, ok := ev.Object.(*coordv1.Lease)
		switch {
		case ev.Type == watch.Error || !ok:
			return
		case ev.Type == watch.Deleted:
			o.del(l.Name)
		case ev.Type == watch.Added || ev.Type == watch.Modified:
			o.put(l)
		}
	}
}

// put records l, keeping seenAt when its version is already known.
func (o *observer) put(l *coordv1.Lease) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if cur, ok := o.m[l.Name]; ok && cur.lease.ResourceVersion == l.ResourceVersion {
		return
	}
	o.m[l.Name] = seen{lease: l.DeepCopy(), seenAt: o.s.now()}
	o.n.notify()
}

func (o *observer) del(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, name)
	o.n.notify()
}

func (o *observer) replace(items []coordv1.Lease) {
	o.mu.Lock()
	keep := map[string]bool{}
	for i := range items {
		keep[items[i].Name] = true
	}
	for name := range o.m {
		if !keep[name] {
			delete(o.m, name)
		}
	}
	o.mu.Unlock()
	for i := range items {
		o.put(&items[i])
	}
	o.n.notify()
}

// get returns what is known of the instance Lease name, and a channel closed
// at the next change of anything the observer knows.
func (o *observer) get(name string) (seen, bool, <-chan struct{}) {
	ch := o.n.wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	st, ok := o.m[name]
	return st, ok, ch
}

// up returns the instances that are up, by name with their holder identity:
// held, not leaving, and seen changed within their duration. It also says
// when the next of them goes stale (0: none) and gives the change channel.
func (o *observer) up() (map[string]string, time.Duration, <-chan struct{}) {
	ch := o.n.wait()
	now := o.s.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]string{}
	var next time.Duration
	for _, st := range o.m {
		h := holderOf(st.lease)
		stale := time.Duration(st.seenAt + int64(o.s.durationOf(st.lease)) - now)
		if h == "" || st.lease.Annotations[annLeaving] != "" || stale <= 0 {
			continue
		}
		out[st.lease.Labels[labelName]] = h
		if next == 0 || stale < next {
			next = stale
		}
	}
	return out, next, ch
}

// WatchInstances calls f with the names of the instances that are up,
// sorted, at once and after each change, until ctx ends. Up: its instance
// Lease is held, not marked leaving (Deregister), and this session has seen
// it renewed within its duration. It reads the observer's watch: no request
// of its own.
func (s *Session) WatchInstances(ctx context.Context, f func(names []string)) {
	var last []string
	first := true
	for ctx.Err() == nil {
		up, next, ch := s.obs.up()
		names := make([]string, 0, len(up))
		for n := range up {
			names = append(names, n)
		}
		sort.Strings(names)
		if first || !equal(names, last) {
			f(names)
			first, last = false, names
		}
		var stale <-chan time.Time
		var t *time.Timer
		if next > 0 {
			t = time.NewTimer(next)
			stale = t.C
		}
		select {
		case <-ch:
		case <-stale:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ClusterLoad counts the terms each instance that is up leads: one list of
// the job Leases, matched against the instances the observer sees up (a job
// Lease counts for an instance when it names that instance's current holder).
func (s *Session) ClusterLoad(ctx context.Context) (map[string]int, error) {
	up, _, _ := s.obs.up()
	list, err := s.leases.List(ctx, metav1.ListOptions{LabelSelector: s.cfg.selector(roleJob)})
	if err != nil {
		return nil, fmt.Errorf("kubelease: cluster load: %w", err)
	}
	load := map[string]int{}
	byHolder := map[string]string{}
	for name, h := range up {
		load[name] = 0
		byHolder[h] = name
	}
	for i := range list.Items {
		if name, ok := byHolder[holderOf(&list.Items[i])]; ok {
			load[name]++
		}
	}
	return load, nil
}
