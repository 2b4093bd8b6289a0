package flock_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/flock"
)

// A second Lock of the same path waits for the first holder's unlock; one
// whose context ends first returns an error and holds nothing.
func TestASecondLockWaitsForTheFirstsUnlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := flock.Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := flock.Lock(ctx, path); err == nil {
		t.Fatal("a Lock whose context had ended got the held lock")
	}
	got := make(chan func(), 1)
	go func() {
		u, err := flock.Lock(context.Background(), path)
		if err != nil {
			t.Error(err)
		}
		got <- u
	}()
	select {
	case <-got:
		t.Fatal("the second Lock returned while the first held the lock")
	case <-time.After(100 * time.Millisecond): // a wait that may only pass: the lock is held throughout
	}
	unlock()
	(<-got)()
}

// TryLock takes a free lock at once and reports a held one without waiting.
func TestTryLockTakesAFreeLockAndReportsAHeldOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if _, _, err := flock.TryLock(path); err == nil {
		t.Fatal("TryLock of a missing file succeeded")
	}
	unlock, err := flock.Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := flock.TryLock(path); ok || err != nil {
		t.Fatalf("TryLock of a held lock: ok %v, err %v; want false, nil", ok, err)
	}
	unlock()
	unlock, ok, err := flock.TryLock(path)
	if !ok || err != nil {
		t.Fatalf("TryLock of a released lock: ok %v, err %v; want true, nil", ok, err)
	}
	unlock()
}
