package chaos

import (
	"testing"
	"time"
)

// The "no acting leader" figure is the longest gap between accepted probe
// writes from the last one before the fault until the cluster settled; for a
// slow-database partition it starts at the cut, since the fault slows the
// leader's writes before it.
func TestNoActingMeasuresTheLongestGapAroundAFault(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var probe []probeRow
	for i, ms := range []int{0, 4000, 4250, 6500, 6750, 7000} { // one write in the slowed link, a takeover at 4.25→6.5 s
		probe = append(probe, probeRow{Seq: int64(i + 1), Committed: at(ms)})
	}
	probe = append(probe, probeRow{Seq: 0, Committed: at(5000)}) // refused by the fence: not a write

	kill := &Fault{Kind: KillLeader, Start: at(4300), Settled: at(6800)}
	slow := &Fault{Kind: PartitionSlowDB, Start: at(3000), Settled: at(6800)}
	early := &Fault{Kind: KillLeader, Start: at(3000), Settled: at(6800)}
	noActing(probe, []*Fault{kill, slow, early})

	if want := 2250 * time.Millisecond; kill.NoActing != want { // 4.25 → 6.5
		t.Errorf("kill: no acting leader %v, want %v", kill.NoActing, want)
	}
	if want := 2250 * time.Millisecond; slow.NoActing != want { // from the cut at 3 s: 3→4 is 1 s, then 4.25→6.5
		t.Errorf("partition-slow-db: no acting leader %v, want %v (counted from the cut)", slow.NoActing, want)
	}
	if want := 4 * time.Second; early.NoActing != want { // any other kind counts from the last write before: 0→4
		t.Errorf("kill before the slowed write: no acting leader %v, want %v", early.NoActing, want)
	}
}
