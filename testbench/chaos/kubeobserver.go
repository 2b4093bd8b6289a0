package chaos

import (
	"context"
	"strconv"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/snip/snip-jobs/internal/sleep"
)

// Package kubelease's layout of a job Lease, as its package comment states
// it: a label naming the job, the holder "<instance>/<incarnation>", the
// token in an annotation.
const (
	kubeJobSelector = "jobs.snip.dev/role=job,jobs.snip.dev/set=" + kubePrefix
	kubeLabelName   = "jobs.snip.dev/name"
	kubeAnnToken    = "jobs.snip.dev/token"
)

// kubeTerm is what a job Lease records: the term's token and the instance
// of its holder ("" when released: resigned, the token kept).
type kubeTerm struct {
	token    int64
	instance string
}

func (t kubeTerm) held() bool { return t.instance != "" }

// kubeWatch watches the job Leases on the API server directly (not through
// any instance's proxy) into an observer: a term starts when a job Lease
// names a holder with a token it did not record before, and ends when the
// Lease records anything else (released, another term) or is deleted. A
// Lease never expires at the API server: the term of a holder that died ends,
// for the observer, when its successor writes the Lease.
type kubeWatch struct {
	o      *observer
	leases coordclient.LeaseInterface
	seen   map[string]kubeTerm // by job
}

// newKubeObserver lists the job Leases, then watches them from that list's
// resourceVersion; a watch that ends is opened again from the last version
// seen, and a version the API server no longer serves (after its restart)
// makes it list again and report the differences.
func newKubeObserver(ctx context.Context, cfg *rest.Config) (*observer, error) {
	cli, err := coordclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	w := &kubeWatch{o: newEventLog(), leases: cli.Leases(kubeNamespace), seen: map[string]kubeTerm{}}
	rv, err := w.list(ctx)
	if err != nil {
		return nil, err
	}
	go w.watch(ctx, rv)
	return w.o, nil
}

// list reads every job Lease, reports what changed since the last event
// seen, and returns the list's resourceVersion.
func (w *kubeWatch) list(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := w.leases.List(ctx, metav1.ListOptions{LabelSelector: kubeJobSelector})
	if err != nil {
		return "", err
	}
	now := time.Now()
	listed := map[string]bool{}
	for i := range l.Items {
		job, t := termOf(&l.Items[i])
		listed[job] = true
		w.saw(job, t, now)
	}
	for job := range w.seen {
		if !listed[job] {
			w.saw(job, kubeTerm{}, now)
		}
	}
	return l.ResourceVersion, nil
}

func (w *kubeWatch) watch(ctx context.Context, rv string) {
	for ctx.Err() == nil {
		if rv == "" {
			var err error
			if rv, err = w.list(ctx); err != nil {
				sleep.For(ctx, 100*time.Millisecond) // the API server is down: try again
				continue
			}
		}
		wi, err := w.leases.Watch(ctx, metav1.ListOptions{LabelSelector: kubeJobSelector, ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			sleep.For(ctx, 100*time.Millisecond)
			continue
		}
		rv = w.follow(wi, rv)
		wi.Stop()
		sleep.For(ctx, 50*time.Millisecond) // the watch ended: resume from where it was
	}
}

// follow reports the watch's events until it ends; it returns the version
// to resume from ("": list again).
func (w *kubeWatch) follow(wi watch.Interface, rv string) string {
	for ev := range wi.ResultChan() {
		now := time.Now()
		if ev.Type == watch.Error {
			if err := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return ""
			}
			return rv
		}
		l, ok := ev.Object.(*coordv1.Lease)
		if !ok {
			continue
		}
		rv = l.ResourceVersion
		switch ev.Type {
		case watch.Added, watch.Modified:
			job, t := termOf(l)
			w.saw(job, t, now)
		case watch.Deleted:
			w.saw(l.Labels[kubeLabelName], kubeTerm{}, now)
		}
	}
	return rv
}

// termOf reads a job Lease: its job and the term it records.
func termOf(l *coordv1.Lease) (string, kubeTerm) {
	var t kubeTerm
	t.token, _ = strconv.ParseInt(l.Annotations[kubeAnnToken], 10, 64)
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.instance, _, _ = strings.Cut(*h, "/")
	}
	return l.Labels[kubeLabelName], t
}

// saw reports job's Lease recording t, at `at`: the end of the term it
// recorded before, the start of t's, or nothing when it is the same term.
func (w *kubeWatch) saw(job string, t kubeTerm, at time.Time) {
	prev := w.seen[job]
	if job == "" || prev == t {
		return
	}
	w.seen[job] = t
	if prev.held() {
		w.o.apply(termEvent{Job: job, Token: prev.token, Instance: prev.instance, At: at})
	}
	if t.held() {
		w.o.apply(termEvent{Job: job, Token: t.token, Instance: t.instance, Start: true, At: at})
	}
}
