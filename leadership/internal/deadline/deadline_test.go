package deadline

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests drive the deadline arithmetic with a fake clock: instants are plain
// numbers of nanoseconds, chosen by the test.

const (
	ttl    = 10 * time.Second
	margin = 3 * time.Second
)

func at(d time.Duration) int64 { return int64(d) }

func TestDeadlineCountsFromTheGrantSendTime(t *testing.T) {
	t.Parallel()
	d := New(at(1*time.Second), ttl, margin)
	if got, want := d.Load(), at(8*time.Second); got != want {
		t.Fatalf("deadline = %v, want send time + TTL − margin = %v", time.Duration(got), time.Duration(want))
	}
	if !d.Valid(at(7999 * time.Millisecond)) {
		t.Fatal("not valid just before the deadline")
	}
	if d.Valid(at(8 * time.Second)) {
		t.Fatal("valid at the deadline")
	}
}

func TestLateResponseCountsFromSendNotArrival(t *testing.T) {
	t.Parallel()
	d := New(0, ttl, margin) // deadline 7 s
	// Keep-alive sent at 3 s, its answer arrives at 6.5 s: etcd reset the expiry
	// somewhere in between, so only the send time is safe.
	got, ok := d.Renew(at(3*time.Second), ttl, margin, at(6500*time.Millisecond))
	if !ok || got != at(10*time.Second) {
		t.Fatalf("renew = %v, %v; want 10s (3 s + 10 s − 3 s), true", time.Duration(got), ok)
	}
}

func TestResponseAfterTheDeadlineIsRefusedAndTheLeaseStaysDead(t *testing.T) {
	t.Parallel()
	d := New(0, ttl, margin) // deadline 7 s
	// Sent at 6.9 s, answered at 7.2 s: the terms were told to stop at 7 s.
	if _, ok := d.Renew(at(6900*time.Millisecond), ttl, margin, at(7200*time.Millisecond)); ok {
		t.Fatal("a keep-alive answered after the deadline renewed the lease")
	}
	for _, now := range []time.Duration{0, 5 * time.Second, 8 * time.Second} {
		if d.Valid(at(now)) {
			t.Fatalf("dead lease valid again at %v", now)
		}
	}
	if _, ok := d.Renew(at(8*time.Second), ttl, margin, at(8*time.Second+time.Millisecond)); ok {
		t.Fatal("dead lease renewed")
	}
}

func TestLostResponsesLetTheDeadlinePass(t *testing.T) {
	t.Parallel()
	d := New(0, ttl, margin)
	if _, ok := d.Renew(at(3*time.Second), ttl, margin, at(3010*time.Millisecond)); !ok {
		t.Fatal("renew refused")
	}
	// Every later keep-alive is lost: nothing moves the deadline from 10 s.
	if !d.Valid(at(9999 * time.Millisecond)) {
		t.Fatal("not valid before the deadline")
	}
	if d.Valid(at(10 * time.Second)) {
		t.Fatal("valid after the deadline with no renewal")
	}
}

func TestShrunkTTLMovesTheDeadlineEarlier(t *testing.T) {
	t.Parallel()
	d := New(0, ttl, margin) // 7 s
	got, ok := d.Renew(at(1*time.Second), 6*time.Second, margin, at(1100*time.Millisecond))
	if !ok || got != at(4*time.Second) {
		t.Fatalf("renew = %v, %v; want 4s (1 s + 6 s − 3 s), true", time.Duration(got), ok)
	}
	if d.Valid(at(5 * time.Second)) {
		t.Fatal("valid past the shrunk deadline")
	}
}

func TestTTLShrunkBelowTheMarginEndsTheLease(t *testing.T) {
	t.Parallel()
	d := New(0, ttl, margin)
	if _, ok := d.Renew(at(2*time.Second), 2*time.Second, margin, at(2100*time.Millisecond)); ok {
		t.Fatal("a TTL shorter than the margin renewed the lease")
	}
	if d.Valid(at(2200 * time.Millisecond)) {
		t.Fatal("lease still valid")
	}
}

func TestKillIsFinal(t *testing.T) {
	t.Parallel()
	d := New(0, ttl, margin)
	if !d.Kill() || d.Kill() {
		t.Fatal("kill should report true once, then false")
	}
	if d.Valid(0) {
		t.Fatal("killed deadline valid")
	}
}

// Validity never comes back once a reader has seen it gone. The keep-alive loop
// reads the clock before renewing, so its "now" can be older than a reader's: a
// renewal computed at 6.9 s that lands after a job saw the 7 s deadline pass must
// not revive the lease.
func TestRenewalComputedBeforeAReaderSawExpiryIsRefused(t *testing.T) {
	t.Parallel()
	d := New(0, ttl, margin) // 7 s
	staleNow := at(6900 * time.Millisecond)
	if d.Valid(at(7100 * time.Millisecond)) {
		t.Fatal("valid after the deadline")
	}
	if _, ok := d.Renew(at(6800*time.Millisecond), ttl, margin, staleNow); ok {
		t.Fatal("a renewal computed before the deadline revived a lease a reader had seen expire")
	}
	if d.Valid(at(7200 * time.Millisecond)) {
		t.Fatal("valid again after the deadline")
	}
}

// The same property with real goroutines racing (run with -race).
func TestValidityIsMonotoneUnderRacingRenewals(t *testing.T) {
	t.Parallel()
	for round := 0; round < 100; round++ {
		var clock atomic.Int64
		d := New(0, ttl, margin)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				now := clock.Load()
				d.Renew(now-int64(time.Second), ttl, margin, now)
			}
		}()
		violated := false
		go func() {
			defer wg.Done()
			sawFalse := false
			for i := 0; i < 300; i++ {
				ok := d.Valid(clock.Add(int64(time.Duration(i%7) * 500 * time.Millisecond)))
				violated = violated || (sawFalse && ok)
				sawFalse = sawFalse || !ok
			}
		}()
		wg.Wait()
		if violated {
			t.Fatalf("round %d: Valid returned true after having returned false", round)
		}
	}
}

// A term stopped being valid at the earliest of its last deadline and the
// instants it or its lease was ended; an end not yet set (0) does not count.
func TestEndedAtIsTheEarliestOfTheDeadlineAndTheEnds(t *testing.T) {
	for _, c := range []struct {
		last int64
		ends []int64
		want int64
	}{
		{100, []int64{0, 0}, 100},   // expired: only the deadline
		{100, []int64{40, 0}, 40},   // resigned before the deadline
		{100, []int64{0, 70}, 70},   // its lease ended first
		{100, []int64{90, 60}, 60},  // both: the earlier
		{100, []int64{130, 0}, 100}, // ended after the deadline had passed
	} {
		if got := EndedAt(c.last, c.ends...); got != c.want {
			t.Errorf("EndedAt(%d, %v) = %d, want %d", c.last, c.ends, got, c.want)
		}
	}
}
