package chaos

import (
	"math"
	"testing"
	"time"
)

// The fit behind a soak's verdict: a series that grows steadily in the
// second half fails; one that grew only while warming up, or that wobbles,
// passes; the bound never falls below its floor.
func TestASoakJudgesTheSecondHalfsTrend(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	const mib = 1 << 20
	var samples []Sample
	for i := range 121 { // two hours, a sample a minute
		rss := 40.0 * mib
		switch {
		case i < 20:
			rss += float64(i) * mib // warming up: +20 MiB, first half only
		default:
			rss += 20 * mib
		}
		leaky := 40*mib + float64(i)*0.2*mib // +12 MiB an hour, all along
		wobble := 30.0 + 10*math.Sin(float64(i))
		samples = append(samples, Sample{At: t0.Add(time.Duration(i) * time.Minute),
			Instances: map[string]ProcSample{
				"warm":  {RSS: rss, Goroutines: wobble, FDs: 12},
				"leaky": {RSS: leaky, Goroutines: wobble, FDs: 12},
			},
			PGConnections: 9, Rows: map[string]int64{"job_runs": 1000}, EtcdKeys: 7, EtcdLeases: 3})
	}
	got := map[string]Trend{}
	for _, tr := range trends(samples) {
		got[tr.Series] = tr
	}
	if tr := got["leaky rss"]; !tr.Failed() || math.Abs(tr.Change-12*mib) > mib/10 {
		t.Errorf("a steady 12 MiB an hour: change %.1f MiB over the second hour, failed %v; want ~12 MiB and a failure", tr.Change/mib, tr.Failed())
	}
	for _, s := range []string{"warm rss", "warm goroutines", "leaky goroutines", "warm fds", "rows of job_runs", "etcd keys", "etcd leases", "PostgreSQL connections"} {
		if tr, ok := got[s]; !ok || tr.Failed() {
			t.Errorf("%s: %+v (present %v); want it judged flat", s, tr, ok)
		}
	}
	if tr := got["warm rss"]; tr.Bound != 8*mib || tr.First != 40*mib || tr.Max != 60*mib {
		t.Errorf("warm rss: bound %.1f MiB (want the floor, 8: 4 MiB/h over one hour is less), first %.0f, max %.0f", tr.Bound/mib, tr.First/mib, tr.Max/mib)
	}
	if _, ok := got["rows of cron_slots"]; ok {
		t.Error("a table never sampled is judged")
	}
}
