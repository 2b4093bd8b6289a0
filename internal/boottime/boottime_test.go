package boottime

import (
	"testing"
	"time"
)

// The clock only moves forward, and at least as far as Go's monotonic
// clock over the same stretch (it also counts suspended time, which a test
// cannot cause).
func TestBoottimeMovesForwardAtLeastAsFarAsTheMonotonicClock(t *testing.T) {
	b0, m0 := Now(), time.Now()
	time.Sleep(20 * time.Millisecond)
	m := time.Since(m0)
	b := Since(b0)
	if b0 <= 0 || b < m-time.Millisecond {
		t.Fatalf("boot time %v then %v later; the monotonic clock moved %v", b0, b, m)
	}
}
