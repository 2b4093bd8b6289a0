package sleep_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
)

func TestForWaitsTheDurationWhileTheContextLives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		if !sleep.For(t.Context(), time.Minute) {
			t.Fatal("For reported an end of the context that did not happen")
		}
		if got := time.Since(begin); got != time.Minute {
			t.Fatalf("For waited %v, want 1m", got)
		}
	})
}

func TestForReturnsWhenTheContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		begin := time.Now()
		if sleep.For(ctx, time.Hour) {
			t.Fatal("For reported the hour passed; the context ended after a second")
		}
		if got := time.Since(begin); got != time.Second {
			t.Fatalf("For returned after %v, want 1s (the context's end)", got)
		}
	})
}

func TestForWithNothingToWaitReportsTheContext(t *testing.T) {
	if !sleep.For(t.Context(), 0) || !sleep.For(t.Context(), -time.Second) {
		t.Fatal("For(0) or For(<0) on a live context reported false")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if sleep.For(ctx, 0) || sleep.For(ctx, time.Hour) {
		t.Fatal("For on an ended context reported true")
	}
}

func TestUntilWaitsForTheInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		at := time.Now().Add(90 * time.Second)
		if !sleep.Until(t.Context(), at) || time.Now().Before(at) {
			t.Fatalf("Until returned at %v, before %v", time.Now(), at)
		}
	})
}
