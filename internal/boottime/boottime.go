// Package boottime reads Linux's CLOCK_BOOTTIME: a monotonic clock that,
// unlike CLOCK_MONOTONIC (Go's monotonic reading), goes on counting while the
// host is suspended. A duration measured on it across a suspend includes the
// suspend, as the clocks of other hosts (etcd's, PostgreSQL's) do.
//
// What it does not guarantee: anything across hosts or reboots; its zero is
// this host's boot.
package boottime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now is the time since this host booted, suspended time included.
func Now() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// Linux has had CLOCK_BOOTTIME since 2.6.39; a kernel without it
		// cannot run this service. Panicking beats a clock that lies.
		panic("boottime: CLOCK_BOOTTIME: " + err.Error())
	}
	return time.Duration(ts.Nano())
}

// Since is the time elapsed since t, a reading of Now.
func Since(t time.Duration) time.Duration { return Now() - t }
