package benchtest

import (
	"sync"
	"testing"
	"time"
)

// WaitChange waits until cond holds, checking it once at the start and again
// each time the channel changed returns is closed, and fails the test naming
// what it waited for once Patience has passed. changed must return a channel
// closed at the next change of the state cond reads (taken before cond reads
// it, so no change is missed): the code under test signals, the test does not
// poll.
func WaitChange(t testing.TB, what string, changed func() <-chan struct{}, cond func() bool) {
	t.Helper()
	timeout := time.NewTimer(Patience)
	defer timeout.Stop()
	for {
		ch := changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("waited %v for: %s", Patience, what)
		}
	}
}

// AnyOf returns a channel closed once any of chans is closed.
func AnyOf(chans ...<-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	var once sync.Once
	for _, ch := range chans {
		go func() {
			select {
			case <-ch:
				once.Do(func() { close(out) })
			case <-out:
			}
		}()
	}
	return out
}
