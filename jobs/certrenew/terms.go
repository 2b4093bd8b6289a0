package certrenew

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/fencing"
)

// startTerm records that this term runs a pass and learns whether an earlier
// term was cut off in the middle of one (its row still 'running': it ended by
// expiry or a crash, not by handing over). Then the lock-delay applies: no
// order before lock_delay has passed since that term was last seen alive.
//
// This is the pass's first fenced write on the job's resource: from its
// commit on, every write of an earlier term is refused, so the earlier
// term's seen_at cannot move any more.
func (p *pass) startTerm(ctx context.Context) error {
	var wait float64
	var lapsed []int64
	err := p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO certrenew_terms (job, token, instance, state) VALUES ($1, $2, $3, 'running')
			ON CONFLICT (job, token) DO UPDATE SET state = 'running', seen_at = now(), instance = EXCLUDED.instance`,
			p.r.Job, p.r.Token, p.r.Instance); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(token ORDER BY token), '{}'),
				coalesce(extract(epoch FROM max(seen_at) + make_interval(secs => $3) - now())::float8, 0)
			FROM certrenew_terms WHERE job = $1 AND token < $2 AND state = 'running'`,
			p.r.Job, p.r.Token, p.opts.LockDelay.Seconds()).Scan(&lapsed, &wait)
		if err != nil {
			return err
		}
		if len(lapsed) > 0 && wait <= 0 {
			return markLapsed(ctx, tx, p.r.Job, lapsed)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(lapsed) > 0 {
		w := time.Duration(wait * float64(time.Second))
		if w > 0 {
			p.gate.until, p.gate.lapsed = time.Now().Add(w), lapsed
			p.log.WarnContext(ctx, "an earlier term ended in the middle of a pass (expiry or crash): no order before the lock-delay has passed",
				"earlier_tokens", lapsed, "lock_delay", p.opts.LockDelay, "wait", w.Round(time.Millisecond))
		} else {
			p.log.InfoContext(ctx, "an earlier term ended in the middle of a pass; its lock-delay has passed", "earlier_tokens", lapsed)
		}
	}
	return nil
}

func markLapsed(ctx context.Context, tx pgx.Tx, job string, tokens []int64) error {
	_, err := tx.Exec(ctx, `UPDATE certrenew_terms SET state = 'lapsed' WHERE job = $1 AND token = ANY($2) AND state = 'running'`,
		job, tokens)
	return err
}

// beforeOrder waits out the lock-delay, once per pass, before the first
// order. Checking ARI, a read, does not wait. delayed reports whether this
// pass had a lock-delay to wait out (an earlier term was cut off mid-pass).
func (p *pass) beforeOrder(ctx context.Context) (delayed bool, err error) {
	p.gate.once.Do(func() {
		if p.gate.until.IsZero() {
			return
		}
		p.gate.err = p.waitLockDelay(ctx)
	})
	return !p.gate.until.IsZero(), p.gate.err
}

func (p *pass) waitLockDelay(ctx context.Context) error {
	deadline := p.gate.until
	p.log.InfoContext(ctx, "waiting out the lock-delay before ordering", "earlier_tokens", p.gate.lapsed,
		"left", time.Until(deadline).Round(time.Millisecond))
	tick := time.NewTicker(max(min(time.Until(deadline)/4, 10*time.Second), 10*time.Millisecond))
	defer tick.Stop()
	for {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-tick.C:
			p.r.Progress() // waiting on purpose, not stuck
		case <-t.C:
		}
		t.Stop()
	}
	err := p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return markLapsed(ctx, tx, p.r.Job, p.gate.lapsed)
	})
	if err != nil {
		p.stop.checkStale(err)
		return fmt.Errorf("certrenew: mark earlier terms lapsed: %w", err)
	}
	p.log.InfoContext(ctx, "lock-delay passed; ordering", "earlier_tokens", p.gate.lapsed)
	return nil
}

// heartbeat keeps this term's seen_at fresh while the pass runs, so that a
// successor counts its lock-delay from close to the moment this term was cut
// off. A refusal means a newer term has started: the pass stops.
func (p *pass) heartbeat(ctx context.Context) {
	t := time.NewTicker(max(p.opts.LockDelay/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE certrenew_terms SET seen_at = now() WHERE job = $1 AND token = $2`, p.r.Job, p.r.Token)
			return err
		})
		switch {
		case err == nil, ctx.Err() != nil:
		case errors.Is(err, fencing.ErrStaleToken):
			p.log.WarnContext(ctx, "a newer term has started: stopping this pass", "err", err)
			p.stop.checkStale(err)
			return
		default:
			p.log.WarnContext(ctx, "heartbeat failed", "err", err)
		}
	}
}

// idleMarkTimeout bounds endTerm.
const idleMarkTimeout = time.Second

// endTerm marks the term idle: no CA call of the pass can reach the CA any
// more, so a successor need not wait the lock-delay for this term. Only while
// the term still holds (the write is fenced like every other). It runs
// between the end of the pass and the resignation, so it is bounded by
// idleMarkTimeout, well inside the job's grace: a mark that does not make it
// only costs the successor the lock-delay.
func (p *pass) endTerm(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, idleMarkTimeout)
	defer cancel()
	err := p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE certrenew_terms SET state = 'idle', seen_at = now() WHERE job = $1 AND token = $2`,
			p.r.Job, p.r.Token)
		return err
	})
	if err != nil {
		p.log.InfoContext(ctx, "could not mark the term idle; a successor will wait the lock-delay", "err", err)
	}
}
