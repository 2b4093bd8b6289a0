// Package deadline is the stop-early arithmetic of package leadership's
// session, the same for every backend: one atomic word holding the instant
// (on the session's Clock) up to which a renewed lease is treated as alive,
// counted from the renewal's *send* time.
//
// What is guaranteed: validity only goes from true to false; a renewal that
// arrives after the deadline passed (or after Kill) cannot revive it. What is
// NOT: any clock; callers pass instants in nanoseconds since their clock's
// origin (the session's: leadership.Config.Clock).
package deadline

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Deadline is the monotonic instant, in nanoseconds since the session's base, up
// to which the session treats its lease as alive: the send time of the newest
// acknowledged keep-alive (or of the grant) plus the granted TTL minus the margin.
//
// It is one atomic word so that Valid costs a clock read and a load. Once it has
// been seen to pass, or the lease is known lost, it becomes dead and stays dead: a
// late acknowledgement cannot bring a lease, or any term on it, back to life.
type Deadline struct{ ns atomic.Int64 }

// Dead is Load's value once the deadline has passed or was killed.
const Dead = math.MinInt64

// New is a deadline sentAt+ttl−margin: a lease granted by a request sent at sentAt.
func New(sentAt int64, ttl, margin time.Duration) *Deadline {
	d := &Deadline{}
	d.ns.Store(sentAt + int64(ttl-margin))
	return d
}

// Valid reports whether now is before the deadline. The first caller to see it
// passed marks it dead, so validity only ever goes from true to false.
func (d *Deadline) Valid(now int64) bool {
	for {
		v := d.ns.Load()
		if v == Dead {
			return false
		}
		if now < v {
			return true
		}
		if d.ns.CompareAndSwap(v, Dead) {
			return false
		}
	}
}

// Renew answers a keep-alive sent at sentAt and acknowledged with the granted ttl,
// observed at now. The new deadline is sentAt+ttl−margin: etcd reset the lease's
// expiry when the keep-alive arrived, which was no earlier than sentAt. It replaces
// the old deadline even when earlier (a shrunk TTL moves expiry earlier at etcd
// too). Renew refuses, and the deadline dies, when the old deadline had already
// passed at now (too late: the terms have been told to stop) or the new one has.
func (d *Deadline) Renew(sentAt int64, ttl, margin time.Duration, now int64) (int64, bool) {
	next := sentAt + int64(ttl-margin)
	for {
		v := d.ns.Load()
		if v == Dead {
			return Dead, false
		}
		if now >= v || now >= next {
			if d.ns.CompareAndSwap(v, Dead) {
				return Dead, false
			}
			continue
		}
		if d.ns.CompareAndSwap(v, next) {
			return next, true
		}
	}
}

// Kill marks the deadline dead; it reports whether this call did it.
func (d *Deadline) Kill() bool { return d.ns.Swap(Dead) != Dead }

// Load returns the deadline, or Dead.
func (d *Deadline) Load() int64 { return d.ns.Load() }

// EndedAt is when a term stopped being valid: the earliest of its lease's
// last deadline and the instants it or its lease was ended (0: not ended).
func EndedAt(lastDeadline int64, ends ...int64) int64 {
	e := lastDeadline
	for _, v := range ends {
		if v != 0 && v < e {
			e = v
		}
	}
	return e
}

// CheckRoom reports, in words without a package prefix, a stop-early margin
// not inside the TTL, or a renew interval that leaves room for fewer than
// two renewals (called renewals, as the backend calls them) before the
// deadline, TTL − margin: one lost renewal must not end the terms.
func CheckRoom(ttl, margin, renew time.Duration, renewals string) []string {
	var out []string
	switch {
	case margin < 0:
		out = append(out, fmt.Sprintf("stop-early margin %v is negative", margin))
	case margin >= ttl:
		out = append(out, fmt.Sprintf("stop-early margin %v must be less than the TTL %v", margin, ttl))
	}
	if renew <= 0 {
		out = append(out, fmt.Sprintf("renew interval %v must be positive", renew))
	} else if margin < ttl && 2*renew >= ttl-margin {
		out = append(out, fmt.Sprintf("renew interval %v leaves room for fewer than two %s before the deadline "+
			"(TTL %v − margin %v = %v); use less than %v", renew, renewals, ttl, margin, ttl-margin, (ttl-margin)/2))
	}
	return out
}
