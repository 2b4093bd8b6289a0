package slots

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/snip/snip-jobs/configs"
)

// The slot a new job's history starts at: the latest fire time at or before
// an instant, however sparse the spec.
func TestLastFireAtOrBefore(t *testing.T) {
	at := time.Date(2026, 6, 10, 12, 34, 56, 0, time.UTC)
	cases := []struct{ spec, want string }{
		{"*/5 * * * *", "2026-06-10T12:30:00Z"},
		{"34 12 * * *", "2026-06-10T12:34:00Z"},
		{"0 8 * * MON", "2026-06-08T08:00:00Z"},
		{"* * * 1 *", "2026-01-31T23:59:00Z"},  // dense, but months ago
		{"0 0 29 2 *", "2024-02-29T00:00:00Z"}, // every four years
		{"0 0 30 2 *", "0001-01-01T00:00:00Z"}, // never
	}
	for _, tc := range cases {
		spec, err := cron.ParseStandard(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		got := lastFireAtOrBefore(configs.Schedule{Spec: spec}, at)
		if got.UTC().Format(time.RFC3339) != tc.want {
			t.Errorf("%q: %s, want %s", tc.spec, got.UTC().Format(time.RFC3339), tc.want)
		}
	}
}
