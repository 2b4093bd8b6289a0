package leadership

import (
	"math"
	"sync/atomic"
	"time"
)

// deadline is the monotonic instant, in nanoseconds since the session's base, up
// to which the session treats its lease as alive: the send time of the newest
// acknowledged keep-alive (or of the grant) plus the granted TTL minus the margin.
//
// It is one atomic word so that Valid costs a clock read and a load. Once it has
// been seen to pass, or the lease is known lost, it becomes dead and stays dead: a
// late acknowledgement cannot bring a lease, or any term on it, back to life.
type deadline struct{ ns atomic.Int64 }

const deadNs = math.MinInt64

func newDeadline(sentAt int64, ttl, margin time.Duration) *deadline {
	d := &deadline{}
	d.ns.Store(sentAt + int64(ttl-margin))
	return d
}

// valid reports whether now is before the deadline. The first caller to see it
// passed marks it dead, so validity only ever goes from true to false.
func (d *deadline) valid(now int64) bool {
	for {
		v := d.ns.Load()
		if v == deadNs {
			return false
		}
		if now < v {
			return true
		}
		if d.ns.CompareAndSwap(v, deadNs) {
			return false
		}
	}
}

// renew answers a keep-alive sent at sentAt and acknowledged with the granted ttl,
// observed at now. The new deadline is sentAt+ttl−margin: etcd reset the lease's
// expiry when the keep-alive arrived, which was no earlier than sentAt. It replaces
// the old deadline even when earlier (a shrunk TTL moves expiry earlier at etcd
// too). renew refuses, and the deadline dies, when the old deadline had already
// passed at now (too late: the terms have been told to stop) or the new one has.
func (d *deadline) renew(sentAt int64, ttl, margin time.Duration, now int64) (int64, bool) {
	next := sentAt + int64(ttl-margin)
	for {
		v := d.ns.Load()
		if v == deadNs {
			return deadNs, false
		}
		if now >= v || now >= next {
			if d.ns.CompareAndSwap(v, deadNs) {
				return deadNs, false
			}
			continue
		}
		if d.ns.CompareAndSwap(v, next) {
			return next, true
		}
	}
}

// kill marks the deadline dead; it reports whether this call did it.
func (d *deadline) kill() bool { return d.ns.Swap(deadNs) != deadNs }

// load returns the deadline, or deadNs.
func (d *deadline) load() int64 { return d.ns.Load() }
