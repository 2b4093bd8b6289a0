package benchtest

import (
	"testing"
	"time"
)

// Patience bounds the tests' waits for things that must happen. It only decides
// how long a broken build takes to fail, never whether a healthy one passes:
// these machines are shared and slow at times, so it is generous.
const Patience = 90 * time.Second

// Eventually polls cond every 20 ms until it holds, and fails the test naming
// what it waited for once Patience has passed.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for: %s", Patience, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
