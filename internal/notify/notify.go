// Package notify is a broadcast of "something changed" without a payload: a
// waiter takes the channel, reads the state it cares about, then waits on the
// channel, so it misses no change made after its read. Used where tests and
// pages wait on a state that the code knows it changed.
package notify

import "sync"

// Notifier is a channel closed at the next Notify. The channel is made only
// when someone waits. The zero value is ready to use.
type Notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait returns a channel that is closed at the next Notify.
func (n *Notifier) Wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

// Notify wakes every waiter.
func (n *Notifier) Notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}
