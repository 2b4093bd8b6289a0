package supervisor

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// bootTimer fires at an instant of CLOCK_BOOTTIME. Go's timers run on
// CLOCK_MONOTONIC, which stops while the host is suspended: a deadline kept
// on them would be late by the length of every suspend. A timerfd on
// CLOCK_BOOTTIME fires at once on resume when its instant passed meanwhile.
type bootTimer struct {
	f  *os.File      // owns the timerfd
	fd int           // the same descriptor, for timerfd_settime
	C  chan struct{} // a value after each expiry; only a hint to look at the clock
}

func newBootTimer() (*bootTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create(CLOCK_BOOTTIME): %w", err)
	}
	t := &bootTimer{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd, C: make(chan struct{}, 1)}
	go t.read()
	return t, nil
}

// read turns expiries into values on C. An expiry read just before set
// moved the timer reaches C after it: a reader of C therefore looks at the
// clock rather than trusting the value.
func (t *bootTimer) read() {
	buf := make([]byte, 8)
	for {
		if _, err := t.f.Read(buf); err != nil {
			return
		}
		select {
		case t.C <- struct{}{}:
		default:
		}
	}
}

// set arms the timer for the instant at on CLOCK_BOOTTIME (one already
// passed fires at once); 0 disarms it.
func (t *bootTimer) set(at time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(at))}
	if err := unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		return fmt.Errorf("timerfd_settime: %w", err)
	}
	return nil
}
