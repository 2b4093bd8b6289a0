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

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/internal/deadline"
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
	go t.follow()
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
	return t.s.at(deadline.EndedAt(t.l.lastDeadline.Load(), t.endNs.Load(), t.l.endNs.Load()))
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

// another reports whether jl, as the observer holds it, records a later
// term or this term released: a version with this term's token was written
// by it, and tokens only grow. Anything else (absent, an older token) may be
// the observer lagging this term's win, and is settled by a read.
func (t *Term) another(jl *coordv1.Lease) bool {
	tok, err := tokenOf(jl)
	return jl != nil && err == nil && (tok > t.token || tok == t.token && holderOf(jl) != t.l.holder)
}

// follow ends the term when its job Lease, as the session's observer sees
// it, is deleted or records another term. The observer's copy is judged
// alone when that is certain; otherwise a read settles it, once per version
// the observer holds. The deadline, not this, is what keeps terms apart:
// another instance takes the job only after this term's instance Lease is
// gone.
func (t *Term) follow() {
	settled := "" // resourceVersion of the observer's copy a read has settled
	for t.ctx.Err() == nil {
		jl, changed := t.s.obs.lease(t.name)
		switch {
		case t.mine(jl):
		case t.another(jl):
			t.end(&leadership.EndedError{Reason: leadership.ReasonKeyLost,
				Detail: fmt.Sprintf("job Lease %s records another term (holder %q, token %q)", t.name, holderOf(jl), jl.Annotations[annToken])})
			return
		case jl == nil || jl.ResourceVersion != settled:
			if ended := t.settle(); ended {
				return
			}
			if jl != nil {
				settled = jl.ResourceVersion
			}
		}
		select {
		case <-changed:
		case <-t.ctx.Done():
		}
	}
}

// settle reads the job Lease and ends the term when it is gone or records
// another term; true when it ended the term. A failed read is left to the
// next change (the deadline ends the term if the API server stays away).
func (t *Term) settle() bool {
	ctx, cancel := context.WithTimeout(t.ctx, t.s.cfg.RenewInterval)
	defer cancel()
	jl, err := t.s.leases.Get(ctx, t.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		t.end(&leadership.EndedError{Reason: leadership.ReasonKeyLost, Detail: "job Lease " + t.name + " gone"})
		return true
	case err != nil:
		return false
	case !t.mine(jl):
		t.end(&leadership.EndedError{Reason: leadership.ReasonKeyLost, Detail: "job Lease " + t.name + " records another term"})
		return true
	}
	return false
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
