package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
)

// A file without jobs is allowed (a server being set up): the scheduler then
// runs until it is stopped, like any other, instead of returning at once
// (which run reported as "the scheduler stopped by itself").
func TestWithoutJobsRunReturnsOnlyWhenStopped(t *testing.T) {
	t.Parallel()
	reg, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{File: &configs.File{Instance: "server-1"}, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// Without the fix Run returned within microseconds; a moment is enough
	// to see that (a slow machine can only hide it, never fail the test).
	select {
	case err := <-done:
		t.Fatalf("Run without jobs returned %v before it was stopped", err)
	case <-time.After(50 * time.Millisecond):
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Run after stop: %v, want nil", err)
	}
}
