// Package flock is an exclusive lock on a file between processes of the test
// bench (a cache folder built once, a port two test binaries both want).
//
// What is guaranteed: one holder at a time among processes that lock the same
// path, and the lock goes with its process however that ends. What is NOT: a
// lock on a network file system, or against processes that do not lock.
//
// Test-only: the production binary must not import it.
package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Lock takes an exclusive lock on path (created if needed), waiting for it
// until ctx ends.
func Lock(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("flock: lock %s: %w", path, err)
	}
	got := make(chan error, 1)
	go func() { got <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("flock: lock %s: %w", path, err)
		}
		return func() { f.Close() }, nil
	case <-ctx.Done():
		// Closing the file ends the pending flock's claim once it returns.
		go func() { <-got; f.Close() }()
		return nil, fmt.Errorf("flock: waiting for the lock %s: %w", path, context.Cause(ctx))
	}
}

// TryLock takes the lock on path, which must exist, if no process holds it;
// ok is false when one does.
func TryLock(path string) (unlock func(), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false, fmt.Errorf("flock: lock %s: %w", path, err)
	}
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
	case err == nil:
		return func() { f.Close() }, true, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		f.Close()
		return nil, false, nil
	default:
		f.Close()
		return nil, false, fmt.Errorf("flock: lock %s: %w", path, err)
	}
}
