//go:build chaos_broken

package leadership

import "time"

// chaosBrokenMargin is the deliberately broken stop-early margin of the
// chaos_broken build: zero, so a term stays valid until the instant etcd could
// expire its lease, leaving in-flight work no time to stop. Only the
// fault-injection suite (chaos/, docs/chaos.md) builds with this tag, to show
// that its checker reports the violations this causes. Never ship it.
func chaosBrokenMargin(time.Duration) time.Duration { return 0 }
