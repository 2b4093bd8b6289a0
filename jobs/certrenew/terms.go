package certrenew

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/scheduler"
)

// lockDelay is the term's row in certrenew_terms and the gate it implies
// (Chubby's lock-delay). It guarantees that the pass places no order before
// lock_delay has passed since an earlier term cut off mid-pass was last seen
// alive, on the database's clock; and that this term's row says 'running'
// while the pass may reach the CA (seen_at kept fresh) and 'idle' only once
// it cannot. Every write is fenced.
type lockDelay struct {
	r     *scheduler.Run
	log   *slog.Logger
	delay time.Duration // lock_delay; 0: off
	stop  *stopper

	// The gate: waited once, before the first order of the pass.
	once   sync.Once
	until  time.Time // our clock: no order before it
	lapsed []int64   // the earlier terms found 'running'
	err    error
}

// start records that this term runs a pass and learns whether an earlier
// term was cut off in the middle of one (its row still 'running': it ended by
// expiry or a crash, not by handing over). Then the lock-delay applies: no
// order before lock_delay has passed since that term was last seen alive.
//
// This is the pass's first fenced write on the job's resource: from its
// commit on, every write of an earlier term is refused, so the earlier
// term's seen_at cannot move any more.
func (g *lockDelay) start(ctx context.Context) error {
	var wait float64
	var lapsed []int64
	err := g.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO certrenew_terms (job, token, instance, state) VALUES ($1, $2, $3, 'running')
			ON CONFLICT (job, token) DO UPDATE SET state = 'running', seen_at = now(), instance = EXCLUDED.instance`,
			g.r.Job, g.r.Token, g.r.Instance); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(token ORDER BY token), '{}'),
				coalesce(extract(epoch FROM max(seen_at) + make_interval(secs => $3) - now())::float8, 0)
			FROM certrenew_terms WHERE job = $1 AND token < $2 AND state = 'running'`,
			g.r.Job, g.r.Token, g.delay.Seconds()).Scan(&lapsed, &wait)
		if err != nil {
			return err
		}
		if len(lapsed) > 0 && wait <= 0 {
			return markLapsed(ctx, tx, g.r.Job, lapsed)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(lapsed) > 0 {
		w := time.Duration(wait * float64(time.Second))
		if w > 0 {
			g.until, g.lapsed = time.Now().Add(w), lapsed
			g.log.WarnContext(ctx, "an earlier term ended in the middle of a pass (expiry or crash): no order before the lock-delay has passed",
				"earlier_tokens", lapsed, "lock_delay", g.delay, "wait", w.Round(time.Millisecond))
		} else {
			g.log.InfoContext(ctx, "an earlier term ended in the middle of a pass; its lock-delay has passed", "earlier_tokens", lapsed)
		}
	}
	return nil
}

func markLapsed(ctx context.Context, tx pgx.Tx, job string, tokens []int64) error {
	_, err := tx.Exec(ctx, `UPDATE certrenew_terms SET state = 'lapsed' WHERE job = $1 AND token = ANY($2) AND state = 'running'`,
		job, tokens)
	return err
}

// BeforeOrder waits out the lock-delay, once per pass, before the first
// order. Checking ARI, a read, does not wait. delayed reports whether this
// pass had a lock-delay to wait out (an earlier term was cut off mid-pass).
func (g *lockDelay) BeforeOrder(ctx context.Context) (delayed bool, err error) {
	g.once.Do(func() {
		if g.until.IsZero() {
			return
		}
		g.err = g.wait(ctx)
	})
	return !g.until.IsZero(), g.err
}

// wait waits until the gate opens, then marks the earlier terms lapsed.
func (g *lockDelay) wait(ctx context.Context) error {
	deadline := g.until
	g.log.InfoContext(ctx, "waiting out the lock-delay before ordering", "earlier_tokens", g.lapsed,
		"left", time.Until(deadline).Round(time.Millisecond))
	tick := time.NewTicker(max(min(time.Until(deadline)/4, 10*time.Second), 10*time.Millisecond))
	defer tick.Stop()
	for left := time.Until(deadline); left > 0; left = time.Until(deadline) {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-tick.C:
			g.r.Progress() // waiting on purpose, not stuck
		case <-time.After(left):
		}
	}
	err := g.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return markLapsed(ctx, tx, g.r.Job, g.lapsed)
	})
	if err != nil {
		g.stop.checkStale(err)
		return fmt.Errorf("certrenew: mark earlier terms lapsed: %w", err)
	}
	g.log.InfoContext(ctx, "lock-delay passed; ordering", "earlier_tokens", g.lapsed)
	return nil
}

// heartbeat keeps this term's seen_at fresh while the pass runs, so that a
// successor counts its lock-delay from close to the moment this term was cut
// off. A refusal means a newer term has started: the pass stops.
func (g *lockDelay) heartbeat(ctx context.Context) {
	t := time.NewTicker(max(g.delay/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := g.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE certrenew_terms SET seen_at = now() WHERE job = $1 AND token = $2`, g.r.Job, g.r.Token)
			return err
		})
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.Is(err, fencing.ErrStaleToken):
			g.log.WarnContext(ctx, "a newer term has started: stopping this pass", "err", err)
			g.stop.checkStale(err)
			return
		default:
			g.log.WarnContext(ctx, "heartbeat failed", "err", err)
		}
	}
}

// idleMarkTimeout bounds end.
const idleMarkTimeout = time.Second

// end marks the term idle: no CA call of the pass can reach the CA any
// more, so a successor need not wait the lock-delay for this term. Only while
// the term still holds (the write is fenced like every other). It runs
// between the end of the pass and the resignation, so it is bounded by
// idleMarkTimeout, well inside the job's grace: a mark that does not make it
// only costs the successor the lock-delay. After a pass that did its work
// (done), the same transaction completes what the run is for (an operator's
// manual run): the pass's end and the request's commit together, so a leader
// that dies after one cannot leave the other for its successor to run again.
func (g *lockDelay) end(ctx context.Context, done bool) {
	ctx, cancel := context.WithTimeout(ctx, idleMarkTimeout)
	defer cancel()
	err := g.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE certrenew_terms SET state = 'idle', seen_at = now() WHERE job = $1 AND token = $2`,
			g.r.Job, g.r.Token)
		if err != nil || !done {
			return err
		}
		return g.r.Complete(ctx, tx)
	})
	if err != nil {
		g.log.InfoContext(ctx, "could not mark the term idle; a successor will wait the lock-delay", "err", err)
	}
}
