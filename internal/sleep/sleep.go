// Package sleep waits for a duration or until a context ends, whichever comes
// first: the one sleep of the project's loops (retry back-offs, poll
// intervals, a job's interval between passes), so that none of them holds a
// shutdown or a term's end for the rest of its wait.
//
// It is a plain timer on the process's clock: tests that must not wait in real
// time give the code under test a shorter duration (or run it under
// testing/synctest), they do not replace this package.
package sleep

import (
	"context"
	"time"
)

// For waits d or until ctx ends, and reports whether d passed with ctx still
// live. A d of zero or less does not wait.
func For(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

// Until is For until the instant t (on the monotonic clock when t carries a
// reading, as time.Now's do).
func Until(ctx context.Context, t time.Time) bool {
	return For(ctx, time.Until(t))
}
