package acmeflow

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-acme/lego/v5/acme"
	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/scheduler"
)

// caThrottle holds the whole renewer back after a CA failure that is not one
// domain's. It guarantees that after a 503 or an account-wide rate limit the
// pass asks the CA nothing until the pause is over, and that the pause is
// recorded (fenced) for whichever instance leads next; a pause only grows.
// Every rate limit is counted. Safe for concurrent use.
type caThrottle struct {
	r                *scheduler.Run
	log              *slog.Logger
	m                *Counters
	unavailablePause time.Duration // a 503 without Retry-After
	stale            func(error)

	paused caPause
}

// left is how long the pause lasts from now (0: not paused), and why.
func (t *caThrottle) left() (time.Duration, string) { return t.paused.left() }

// restore carries over the pause an earlier pass recorded, until until on
// our clock.
func (t *caThrottle) restore(until time.Time, reason string) { t.paused.extend(until, reason) }

// failed applies what a CA failure means beyond its domain: a 503 pauses
// the renewer; a rate limit is counted, and pauses the renewer when it is the
// account's.
func (t *caThrottle) failed(ctx context.Context, f failure, domain string) {
	if f.reason == ReasonRateLimited {
		wait := cmp.Or(f.retryAfter, defaultRateLimitWait)
		t.m.RateLimitWaits.WithLabelValues(t.r.Job).Inc()
		t.m.RateLimitWaitSeconds.WithLabelValues(t.r.Job).Add(wait.Seconds())
		var pd *acme.ProblemDetails
		if errors.As(f.err, &pd) && strings.Contains(strings.ToLower(pd.Detail), "account") {
			t.pause(ctx, wait, "account rate limit: "+pd.Detail)
		}
	}
	if f.pause {
		wait := cmp.Or(f.retryAfter, t.unavailablePause)
		reason := "the CA answered 503"
		if domain != "" {
			reason += " (ordering " + domain + ")"
		}
		t.pause(ctx, wait, reason)
	}
}

// pause stops this pass from asking the CA for d, and records the pause so
// that whichever instance leads next honours it.
func (t *caThrottle) pause(ctx context.Context, d time.Duration, reason string) {
	if !t.paused.extend(time.Now().Add(d), reason) {
		return
	}
	t.log.WarnContext(ctx, "pausing the renewer: not asking the CA", "for", d.Round(time.Second), "reason", reason)
	err := t.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO certrenew_job (job, paused_until, pause_reason, token)
			VALUES ($1, now() + make_interval(secs => $2), $3, $4)
			ON CONFLICT (job) DO UPDATE SET paused_until = greatest(certrenew_job.paused_until, EXCLUDED.paused_until),
				pause_reason = EXCLUDED.pause_reason, token = EXCLUDED.token, updated_at = now()`,
			t.r.Job, d.Seconds(), reason, t.r.Token)
		return err
	})
	if err != nil {
		t.stale(err)
		t.log.WarnContext(ctx, "could not record the pause", "err", err)
	}
}

// caPause is until when the pass asks the CA nothing (a rate limit, an
// outage), on this host's monotonic clock, and why.
type caPause struct {
	mu     sync.Mutex
	until  time.Time // zero: not paused
	reason string
}

// left is how long the pause lasts from now (0: not paused), and why.
func (c *caPause) left() (time.Duration, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until.IsZero() {
		return 0, ""
	}
	return max(time.Until(c.until), 0), c.reason
}

// extend pauses until until, unless a pause already lasts longer; it
// reports whether the pause was extended.
func (c *caPause) extend(until time.Time, reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !until.After(c.until) {
		return false
	}
	c.until, c.reason = until, reason
	return true
}
