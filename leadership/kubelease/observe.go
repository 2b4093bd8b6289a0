package kubelease

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/snip/snip-jobs/internal/notify"
	"github.com/snip/snip-jobs/internal/sleep"
)

// observer follows every Lease of the set (instance and job Leases) by one
// list and one watch per session, whatever the number of jobs: campaigns
// and terms read it instead of reading or watching Leases of their own. It
// remembers when this session first saw each version of each Lease (seenAt,
// on its monotonic clock). seenAt is never earlier than the version's write,
// and so never earlier than the send time of the renewal that wrote it: a
// wait of the Lease's duration from seenAt outlasts its holder's deadline.
// A version seen late (a slow or broken watch) only makes the wait longer.
//
// What it holds may lag the API server, and a fresh read put in (put) may
// be followed by an older watch event: readers judge from it only what is
// safe to judge late, and every write made on that judgement carries the
// resourceVersion read as its precondition.
type observer struct {
	st     *store
	synced chan struct{} // closed after the first list
	once   sync.Once

	mu     sync.Mutex
	m      map[string]seen
	byName map[string]*notify.Notifier
	all    notify.Notifier
}

type seen struct {
	lease  *coordv1.Lease
	seenAt int64
}

func newObserver(st *store) *observer {
	return &observer{st: st, synced: make(chan struct{}), m: map[string]seen{}, byName: map[string]*notify.Notifier{}}
}

// run lists and then watches until ctx ends; a broken watch is followed by a
// fresh list (retried at a quarter of the renew interval while the API
// server does not answer). A watch the API server refuses (the account
// lacks the verb) degrades to a list every quarter renew interval: said
// once, as a warning, since it costs the API server that much more.
func (o *observer) run(ctx context.Context) {
	sel := o.st.cfg.setSelector()
	warned := false
	for ctx.Err() == nil {
		list, err := o.st.leases.List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			o.st.log.Debug("list of the set's Leases failed; retrying", "err", err)
			sleep.For(ctx, o.st.cfg.RenewInterval/4)
			continue
		}
		o.replace(list.Items)
		o.once.Do(func() { close(o.synced) })
		w, err := o.st.leases.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			if !warned && (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) {
				warned = true
				o.st.log.Warn("the API server refuses to watch the set's Leases: listing them every quarter renew interval instead; "+
					"grant the account watch on leases (deploy/kubernetes/role.yaml)", "err", err)
			}
			sleep.For(ctx, o.st.cfg.RenewInterval/4)
			continue
		}
		o.follow(w)
		w.Stop()
	}
}

// waitSynced waits until the first list is in (or ctx ends).
func (o *observer) waitSynced(ctx context.Context) error {
	select {
	case <-o.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
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
	o.m[l.Name] = seen{lease: l.DeepCopy(), seenAt: o.st.now()}
	o.notifyLocked(l.Name)
}

func (o *observer) del(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.m[name]; !ok {
		return
	}
	delete(o.m, name)
	o.notifyLocked(name)
}

func (o *observer) notifyLocked(name string) {
	if n := o.byName[name]; n != nil {
		n.Notify()
	}
	o.all.Notify()
}

func (o *observer) replace(items []coordv1.Lease) {
	keep := map[string]bool{}
	for i := range items {
		keep[items[i].Name] = true
		o.put(&items[i])
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for name := range o.m {
		if !keep[name] {
			delete(o.m, name)
			o.notifyLocked(name)
		}
	}
}

// get returns what is known of the Lease name, and a channel closed at its
// next change.
func (o *observer) get(name string) (seen, bool, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.byName[name]
	if n == nil {
		n = &notify.Notifier{}
		o.byName[name] = n
	}
	ch := n.Wait()
	st, ok := o.m[name]
	return st, ok, ch
}

// lease is the Lease name as known (nil: absent), with its change channel.
func (o *observer) lease(name string) (*coordv1.Lease, <-chan struct{}) {
	st, _, ch := o.get(name)
	return st.lease, ch
}

// up returns the instances that are up, by name with their holder identity:
// held, not leaving, and seen changed within their duration. It also says
// when the next of them goes stale (0: none) and gives the change channel.
func (o *observer) up() (map[string]string, time.Duration, <-chan struct{}) {
	now := o.st.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	ch := o.all.Wait()
	out := map[string]string{}
	var next time.Duration
	for _, st := range o.m {
		if st.lease.Labels[labelRole] != roleInstance {
			continue
		}
		h := holderOf(st.lease)
		stale := time.Duration(st.seenAt + int64(o.st.durationOf(st.lease)) - now)
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
func (st *store) WatchInstances(ctx context.Context, f func(names []string)) {
	var last []string
	first := true
	for ctx.Err() == nil {
		up, next, ch := st.obs.up()
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
func (st *store) ClusterLoad(ctx context.Context) (map[string]int, error) {
	up, _, _ := st.obs.up()
	list, err := st.leases.List(ctx, metav1.ListOptions{LabelSelector: st.cfg.selector(roleJob)})
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
