package leadership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership/internal/deadline"
)

// Term is one instance's leadership of one job. See the package comment for what
// it guarantees. All methods are safe for concurrent use.
type Term struct {
	s       *Session
	l       *Lease
	claim   Claim
	job     string
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

// Token is the fencing token. Later terms of the same job always have larger tokens.
func (t *Term) Token() int64 { return t.token }

// Lease names the lease the term hangs on, as its store does (Stats.Lease).
func (t *Term) Lease() string { return t.l.held.ID() }

// Started is when the term was granted (monotonic reading included).
func (t *Term) Started() time.Time { return t.started }

// Context is cancelled when the term ends; context.Cause gives an *EndedError.
// Pass it to every I/O the job does on behalf of the term.
func (t *Term) Context() context.Context { return t.ctx }

// Deadline is the instant the term stops being valid unless the lease is renewed
// first. It moves later with each acknowledged renewal. The zero Time once the
// term has ended.
func (t *Term) Deadline() time.Time {
	if t.done.Load() {
		return time.Time{}
	}
	return t.l.Deadline()
}

// Valid reports, without I/O or allocation, that the term has not ended and its
// deadline is ahead. Once false it stays false.
func (t *Term) Valid() bool {
	return !t.done.Load() && t.l.dl.Valid(t.s.clock.now())
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
// has not ended: the earliest of the moment it was ended (resign, record lost), the
// moment its lease was ended (lost, shutdown) and its last deadline (expiry).
func (t *Term) EndedAt() time.Time {
	if t.ctx.Err() == nil {
		return time.Time{}
	}
	return t.s.clock.at(deadline.EndedAt(t.l.lastDeadline.Load(), t.endNs.Load(), t.l.endNs.Load()))
}

// end ends the term with cause unless it has already ended.
func (t *Term) end(cause *EndedError) {
	if t.done.Swap(true) {
		return
	}
	t.endNs.CompareAndSwap(0, t.s.clock.now())
	t.cancel(t.l.seenLate(cause))
}

// Resign ends the term and has the store release its record if it is still
// this term's, so a waiting candidate wins at once. Stop the job's work
// before resigning: the successor may start as soon as the record is gone.
// Resigning a term that has already ended still releases its record,
// except when it ended with its lease (expired, lost): then it returns at once
// without I/O, because the session has the store release that lease, and
// every record on it, as soon as the store answers — a Resign waiting on an
// unreachable store would only keep the caller from campaigning again when
// the store is back. A failed release is tried again until ctx ends, unless
// the store refused it (ErrRefused): then Resign returns at once.
func (t *Term) Resign(ctx context.Context) error {
	if r := t.Reason(); r == ReasonExpired || r == ReasonLeaseLost {
		t.log.Info("resign: the term ended with its lease; the session releases it", "reason", r)
		return nil
	}
	t.end(Ended(ReasonResigned, ""))
	for attempts := 1; ; attempts++ {
		began := time.Now()
		actx, cancel := context.WithTimeout(ctx, resignAttempt)
		err := t.claim.Release(actx)
		cancel()
		if err == nil {
			t.log.Info("resigned", "attempts", attempts)
			return nil
		}
		if ctx.Err() != nil || errors.Is(err, ErrRefused) {
			t.log.Warn("resign: record not released; the successor waits for the lease to end", "err", err, "attempts", attempts)
			return fmt.Errorf("leadership: resign %s (token %d): %w", t.job, t.token, err)
		}
		sleep.For(ctx, resignAttempt-time.Since(began)) // one that failed at once (no leader) waits out its second
	}
}

// resignAttempt bounds one attempt of Resign's release. A request whose
// proposal reached an etcd leader that then died is answered only at etcd's
// request timeout (seconds), after the election has long ended: Resign tries
// again rather than wait for it. The release is guarded by the token, so
// trying again is harmless.
const resignAttempt = time.Second
