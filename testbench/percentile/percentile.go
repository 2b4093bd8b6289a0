// Package percentile reports what a benchmark's iterations measured as p50
// and p99, with no dependency of its own (a supervisor's test binary, which
// benchmarks re-execute, stays small).
package percentile

import (
	"slices"
	"testing"
	"time"
)

// Report reports the p50 and p99 of took (in milliseconds) as the
// benchmark's metrics, their names after prefix.
func Report(b *testing.B, prefix string, took []time.Duration) {
	if len(took) == 0 {
		return
	}
	took = slices.Sorted(slices.Values(took))
	at := func(q float64) float64 {
		return float64(took[min(len(took)-1, int(q*float64(len(took))))]) / 1e6
	}
	b.ReportMetric(at(0.50), prefix+"p50-ms")
	b.ReportMetric(at(0.99), prefix+"p99-ms")
}
