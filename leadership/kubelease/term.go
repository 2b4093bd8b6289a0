package kubelease

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
)

// Term is one instance's leadership of one job, as leadership.Term is (see
// the package comment for what it guarantees here). Safe for concurrent use.
type Term struct {
	s       *Session
	l       *lease
	job     string
	name    string // the job Lease
	token   int64
	started time.Time
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   atomic.Bool
	endNs  atomic.Int64
}

func (s *Session) newTerm(l *lease, job string, token int64, won *coordv1.Lease) *Term {
	t := &Term{s: s, l: l, job: job, name: won.Name, token: token, started: time.Now(),
		log: s.log.With("job", job, "token", token)}
	t.ctx, t.cancel = context.WithCancelCause(l.ctx)
	context.AfterFunc(t.ctx, func() {
		t.done.Store(true)
		t.log.Info("term ended", "reason", t.Reason(), "err", t.Err(), "held_for", time.Since(t.started))
	})
	go t.watch(won.ResourceVersion)
	t.log.Info("term started", "holder", l.holder, "deadline_in", time.Duration(l.dl.Load()-s.now()))
	return t
}

// Job is the job this term leads.
func (t *Term) Job() string { return t.job }

// Token is the fencing token: the job Lease's token annotation, bumped by
// every new term under the resourceVersion precondition.
func (t *Term) Token() int64 { return t.token }

// Started is when the term was granted (monotonic reading included).
func (t *Term) Started() time.Time { return t.started }

// Context ends when the term does; context.Cause gives a *leadership.EndedError.
func (t *Term) Context() context.Context { return t.ctx }

// Deadline is when the term stops being valid unless the instance Lease is
// renewed first; the zero Time once it has ended.
func (t *Term) Deadline() time.Time {
	if t.done.Load() {
		return time.Time{}
	}
	v := t.l.dl.Load()
	if v == deadlineDead {
		return time.Time{}
	}
	return t.s.at(v)
}

// Valid reports, without I/O or allocation, that the term has not ended and
// its deadline is ahead. Once false it stays false.
func (t *Term) Valid() bool { return !t.done.Load() && t.l.dl.Valid(t.s.now()) }

// Reason is why the term ended, or "" while it has not.
func (t *Term) Reason() leadership.Reason {
	if t.ctx.Err() == nil {
		return ""
	}
	return leadership.ReasonOf(context.Cause(t.ctx))
}

// Err is the term's *leadership.EndedError once it has ended, else nil.
func (t *Term) Err() error {
	if t.ctx.Err() == nil {
		return nil
	}
	return context.Cause(t.ctx)
}

// EndedAt is the instant the term stopped being valid (the earliest of its
// end, its instance Lease's end and its last deadline), or the zero Time.
func (t *Term) EndedAt() time.Time {
	if t.ctx.Err() == nil {
		return time.Time{}
	}
	e := t.l.lastDeadline.Load()
	for _, v := range []int64{t.endNs.Load(), t.l.endNs.Load()} {
		if v != 0 && v < e {
			e = v
		}
	}
	return t.s.at(e)
}

func (t *Term) end(cause *leadership.EndedError) {
	if t.done.Swap(true) {
		return
	}
	t.endNs.CompareAndSwap(0, t.s.now())
	t.cancel(cause)
}

// mine reports whether the job Lease still records this term.
func (t *Term) mine(jl *coordv1.Lease) bool {
	tok, err := tokenOf(jl)
	return err == nil && tok == t.token && holderOf(jl) == t.l.holder
}

// watch ends the term when its job Lease is deleted or records another term.
// A broken watch is followed by a read that checks the Lease, then a new watch.
func (t *Term) watch(rv string) {
	leases := t.s.leases
	for t.ctx.Err() == nil {
		w, err := leases.Watch(t.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + t.name, ResourceVersion: rv})
		if err == nil {
			for ev := range w.ResultChan() {
				jl, ok := ev.Object.(*coordv1.Lease)
				if ev.Type == watch.Error || !ok {
					break
				}
				if ev.Type == watch.Deleted || !t.mine(jl) {
					t.end(&leadership.EndedError{Reason: leadership.ReasonKeyLost,
						Detail: fmt.Sprintf("job Lease %s %s (holder %q, token %q)", t.name, ev.Type, holderOf(jl), jl.Annotations[annToken])})
					w.Stop()
					return
				}
				rv = jl.ResourceVersion
			}
			w.Stop()
		}
		if t.ctx.Err() != nil {
			return
		}
		rctx, cancel := context.WithTimeout(t.ctx, t.s.cfg.RenewInterval)
		jl, err := leases.Get(rctx, t.name, metav1.GetOptions{})
		cancel()
		switch {
		case apierrors.IsNotFound(err):
			t.end(&leadership.EndedError{Reason: leadership.ReasonKeyLost, Detail: "job Lease " + t.name + " gone"})
			return
		case err != nil:
			sleep.For(t.ctx, t.s.cfg.RenewInterval/4) // unreachable: the deadline ends the term if this lasts
		case !t.mine(jl):
			t.end(&leadership.EndedError{Reason: leadership.ReasonKeyLost, Detail: "job Lease " + t.name + " records another term"})
			return
		default:
			rv = jl.ResourceVersion
		}
	}
}

// Resign ends the term and releases its job Lease (holder cleared, token
// kept) if it still records this term, so that a waiting candidate wins at
// once. A term that ended with its instance Lease returns at once: the
// instance Lease's fate (renewed by a new incarnation, or expired by a peer)
// frees the job. Stop the job's work before resigning.
func (t *Term) Resign(ctx context.Context) error {
	if r := t.Reason(); r == leadership.ReasonExpired || r == leadership.ReasonLeaseLost {
		return nil
	}
	t.end(&leadership.EndedError{Reason: leadership.ReasonResigned})
	for attempts := 1; ; attempts++ {
		err := t.release(ctx)
		if err == nil {
			t.log.Info("resigned", "attempts", attempts)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("kubelease: resign %s (token %d): %w", t.job, t.token, err)
		}
		sleep.For(ctx, t.s.cfg.RenewInterval/4)
	}
}

func (t *Term) release(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, t.s.cfg.RenewInterval)
	defer cancel()
	jl, err := t.s.leases.Get(rctx, t.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !t.mine(jl) {
		return nil
	}
	jl.Spec.HolderIdentity = nil
	delete(jl.Annotations, annResign)
	_, err = t.s.leases.Update(rctx, jl, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err // a conflict is tried again
}
