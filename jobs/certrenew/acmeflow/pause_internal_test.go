package acmeflow

import (
	"testing"
	"time"
)

// A pause only grows: a shorter one asked for later (another worker's rate
// limit) keeps the longer one and its reason.
func TestAPauseIsExtendedNeverShortened(t *testing.T) {
	t.Parallel()
	var c caPause
	if d, _ := c.left(); d != 0 {
		t.Fatalf("a new pause lasts %v", d)
	}
	now := time.Now()
	if !c.extend(now.Add(time.Hour), "account rate limit") {
		t.Fatal("the first pause did not take")
	}
	if c.extend(now.Add(time.Minute), "CA unavailable") {
		t.Fatal("a shorter pause replaced a longer one")
	}
	if d, reason := c.left(); d <= time.Minute || reason != "account rate limit" {
		t.Fatalf("left %v %q, want about an hour for the rate limit", d, reason)
	}
}
