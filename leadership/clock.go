package leadership

import (
	"time"

	"github.com/snip/snip-jobs/internal/boottime"
)

// Clock is the clock every deadline of leadership is kept on, the session's
// and each store's: monotonic, and counting the time the host spent
// suspended, as etcd's and the API server's clocks do, so that a term renewed
// before a suspend is judged after it by how long ago that truly was (Go's
// monotonic reading is CLOCK_MONOTONIC, which stops during a suspend).
type Clock interface {
	// Now is the time since an arbitrary origin, fixed for the process.
	Now() time.Duration
}

// BootClock is Linux's CLOCK_BOOTTIME: Config's default Clock.
type BootClock struct{}

func (BootClock) Now() time.Duration { return boottime.Now() }
