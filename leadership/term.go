package leadership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership/internal/deadline"
)

// Reason says why a term (or a lease, and with it every term on it) ended.
type Reason string

const (
	// ReasonExpired: the deadline passed without a renewal: keep-alives failed or
	// went unanswered (partition, etcd without quorum, a long pause of this process).
	ReasonExpired Reason = "expired"
	// ReasonLeaseLost: etcd answered that the lease no longer exists.
	ReasonLeaseLost Reason = "lease-lost"
	// ReasonKeyLost: the leader key was deleted or replaced by someone else
	// (an operator, or a successor after the lease was revoked).
	ReasonKeyLost Reason = "key-lost"
	// ReasonResigned: Term.Resign was called.
	ReasonResigned Reason = "resigned"
	// ReasonShutdown: Session.Close was called.
	ReasonShutdown Reason = "shutdown"
)

// Reasons lists every Reason, for metrics that want a series per reason.
var Reasons = []Reason{ReasonExpired, ReasonLeaseLost, ReasonKeyLost, ReasonResigned, ReasonShutdown}

// EndedError is the cause of a term's (or lease's) context once it has ended.
type EndedError struct {
	Reason Reason
	Detail string
}

func (e *EndedError) Error() string {
	if e.Detail == "" {
		return "leadership ended: " + string(e.Reason)
	}
	return "leadership ended: " + string(e.Reason) + ": " + e.Detail
}

func ended(r Reason, format string, args ...any) *EndedError {
	return &EndedError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the Reason carried by err, or "" if err is not an EndedError.
func ReasonOf(err error) Reason {
	var e *EndedError
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Term is one instance's leadership of one job. See the package comment for what
// it guarantees. All methods are safe for concurrent use.
type Term struct {
	s       *Session
	l       *lease
	job     string
	key     string
	token   int64
	started time.Time
	log     *slog.Logger

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   atomic.Bool  // set before cancel, read by Valid
	endNs  atomic.Int64 // session instant end was called (0: not called)
}

// Job is the job this term leads.
func (t *Term) Job() string { return t.job }

// Token is the fencing token: the leader key's CreateRevision. Later terms of the
// same job always have larger tokens.
func (t *Term) Token() int64 { return t.token }

// Lease is the etcd lease the leader key is attached to.
func (t *Term) Lease() clientv3.LeaseID { return t.l.id }

// Started is when the term was granted (monotonic reading included).
func (t *Term) Started() time.Time { return t.started }

// Context is cancelled when the term ends; context.Cause gives an *EndedError.
// Pass it to every I/O the job does on behalf of the term.
func (t *Term) Context() context.Context { return t.ctx }

// Deadline is the instant the term stops being valid unless the lease is renewed
// first. It moves later with each acknowledged keep-alive. The zero Time once the
// term has ended.
func (t *Term) Deadline() time.Time {
	if t.done.Load() {
		return time.Time{}
	}
	v := t.l.dl.Load()
	if v == deadline.Dead {
		return time.Time{}
	}
	return t.s.base.Add(time.Duration(v))
}

// Valid reports, without I/O or allocation, that the term has not ended and its
// deadline is ahead. Once false it stays false.
func (t *Term) Valid() bool {
	return !t.done.Load() && t.l.dl.Valid(t.s.now())
}

// Reason is why the term ended, or "" while it has not.
func (t *Term) Reason() Reason {
	if t.ctx.Err() == nil {
		return ""
	}
	return ReasonOf(context.Cause(t.ctx))
}

// Err is the term's *EndedError once it has ended, else nil.
func (t *Term) Err() error {
	if t.ctx.Err() == nil {
		return nil
	}
	return context.Cause(t.ctx)
}

// EndedAt is the instant the term stopped being valid, or the zero Time while it
// has not ended: the earliest of the moment it was ended (resign, key lost), the
// moment its lease was ended (lost, shutdown) and its last deadline (expiry).
func (t *Term) EndedAt() time.Time {
	if t.ctx.Err() == nil {
		return time.Time{}
	}
	return t.s.at(deadline.EndedAt(t.l.lastDeadline.Load(), t.endNs.Load(), t.l.endNs.Load()))
}

// end ends the term with cause unless it has already ended.
func (t *Term) end(cause *EndedError) {
	if t.done.Swap(true) {
		return
	}
	t.endNs.CompareAndSwap(0, t.s.now())
	t.cancel(cause)
}

// Resign ends the term and deletes the leader key if it is still this term's
// (guarded by its CreateRevision), so a waiting candidate wins at once. Stop the
// job's work before resigning: the successor may start as soon as the key is gone.
// Resigning a term that has already ended still removes its key if present,
// except when it ended with its lease (expired, lost): then it returns at once
// without I/O, because the session revokes that lease, and every key on it, as
// soon as etcd answers — a Resign waiting on an unreachable etcd would only
// keep the caller from campaigning again when etcd is back.
func (t *Term) Resign(ctx context.Context) error {
	if r := t.Reason(); r == ReasonExpired || r == ReasonLeaseLost {
		t.log.Info("resign: the term ended with its lease; the session revokes it", "reason", r)
		return nil
	}
	t.end(ended(ReasonResigned, ""))
	for attempts := 1; ; attempts++ {
		began := time.Now()
		actx, cancel := context.WithTimeout(ctx, resignAttempt)
		resp, err := t.s.cfg.Client.Txn(actx).
			If(clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.token)).
			Then(clientv3.OpDelete(t.key)).
			Commit()
		cancel()
		if err == nil {
			t.log.Info("resigned", "deleted", resp.Succeeded, "attempts", attempts)
			return nil
		}
		if ctx.Err() != nil {
			t.log.Warn("resign: leader key not deleted; successor waits for the lease to end", "err", err, "attempts", attempts)
			return fmt.Errorf("leadership: resign %s (token %d): %w", t.job, t.token, err)
		}
		sleep.For(ctx, resignAttempt-time.Since(began)) // one that failed at once (no leader) waits out its second
	}
}

// resignAttempt bounds one attempt of Resign's delete. A request whose
// proposal reached an etcd leader that then died is answered only at etcd's
// request timeout (seconds), after the election has long ended: Resign tries
// again rather than wait for it. The delete is guarded by the token, so
// trying again is harmless.
const resignAttempt = time.Second

// watchKey ends the term if its leader key is deleted or replaced. A broken
// watch (compaction, reconnect) is followed by a Get that re-checks the key.
func (t *Term) watchKey() {
	cli := t.s.cfg.Client
	next := t.token + 1
	for t.ctx.Err() == nil {
		for resp := range cli.Watch(t.ctx, t.key, clientv3.WithRev(next)) {
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				switch {
				case ev.Type == clientv3.EventTypeDelete:
					t.end(ended(ReasonKeyLost, "leader key %s deleted at revision %d", t.key, ev.Kv.ModRevision))
					return
				case ev.Kv.CreateRevision != t.token:
					t.end(ended(ReasonKeyLost, "leader key %s replaced at revision %d", t.key, ev.Kv.ModRevision))
					return
				}
			}
			next = resp.Header.Revision + 1
		}
		if t.ctx.Err() != nil {
			return
		}
		// The watch broke: look at the key directly, then watch again from there.
		rctx, cancel := context.WithTimeout(t.ctx, t.s.cfg.RenewInterval)
		resp, err := cli.Get(rctx, t.key)
		cancel()
		switch {
		case err != nil:
			// etcd unreachable: the lease deadline ends the term if this lasts.
			sleep.For(t.ctx, t.s.cfg.RenewInterval/4)
		case len(resp.Kvs) == 0:
			t.end(ended(ReasonKeyLost, "leader key %s gone", t.key))
			return
		case resp.Kvs[0].CreateRevision != t.token:
			t.end(ended(ReasonKeyLost, "leader key %s replaced (create revision %d)", t.key, resp.Kvs[0].CreateRevision))
			return
		default:
			next = resp.Header.Revision + 1
		}
	}
}
