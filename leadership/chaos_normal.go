//go:build !chaos_broken

package leadership

import "time"

// chaosBrokenMargin returns the configured stop-early margin unchanged. Its
// twin in chaos_broken.go (build tag chaos_broken, used only by the
// fault-injection suite in chaos/ to show that its checker catches a broken
// build) returns zero.
func chaosBrokenMargin(m time.Duration) time.Duration { return m }
