package acmeflow

import (
	"math/rand/v2"
	"time"
)

// Backoff is the wait after the n-th consecutive failed order of a domain:
// 1 m, 10 m, 100 m, then daily.
func Backoff(failures int) time.Duration {
	switch {
	case failures <= 0:
		return 0
	case failures == 1:
		return time.Minute
	case failures == 2:
		return 10 * time.Minute
	case failures == 3:
		return 100 * time.Minute
	}
	return 24 * time.Hour
}

// pickInWindow picks the renewal instant uniformly inside the CA's window
// [start, end) (RFC 9773 §4.2), so that the CA's load is spread. It is never
// later than lastSafe.
func pickInWindow(start, end, lastSafe time.Time) time.Time {
	t := start
	if w := end.Sub(start); w > 0 {
		t = start.Add(time.Duration(rand.Int64N(int64(w))))
	}
	if t.After(lastSafe) {
		t = lastSafe
	}
	return t
}

// lastSafeRenewal is the latest instant at which the renewer will still
// believe an ARI window: a tenth of the lifetime before expiry. A CA that
// suggests a later window (a bug, or a clock far off) is not followed into
// an expired certificate.
func lastSafeRenewal(notBefore, notAfter time.Time) time.Time {
	return notAfter.Add(-notAfter.Sub(notBefore) / 10)
}

// ARI re-check intervals: the CA's Retry-After clamped to [ariMinRecheck,
// ariMaxRecheck], twice a day without one, and an hour after a failed check.
const (
	ariMinRecheck   = time.Minute
	ariMaxRecheck   = 24 * time.Hour
	ariDefault      = 12 * time.Hour
	ariAfterFailure = time.Hour
)

func ariRecheck(retryAfter time.Duration) time.Duration {
	switch {
	case retryAfter <= 0:
		return ariDefault
	case retryAfter < ariMinRecheck:
		return ariMinRecheck
	case retryAfter > ariMaxRecheck:
		return ariMaxRecheck
	}
	return retryAfter
}

// defaultRateLimitWait applies to a rate limit that came without Retry-After.
const defaultRateLimitWait = time.Hour

// retryWait is how long a domain waits before its next order after failure
// f, its failures-th in a row: its back-off, or the CA's Retry-After when a
// rate limit or a 503 asks for longer (unavailablePause for a 503 without
// one).
func retryWait(f failure, failures int, unavailablePause time.Duration) time.Duration {
	wait := Backoff(failures)
	if f.reason == ReasonRateLimited || f.pause {
		wait = max(f.retryAfter, wait)
		if wait == 0 {
			wait = defaultRateLimitWait
			if f.pause {
				wait = unavailablePause
			}
		}
	}
	return wait
}
