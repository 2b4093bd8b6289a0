package layout_test

import (
	"testing"
	"time"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
)

// With etcd's default election timeout, an election leaves renewals
// unanswered for up to Rules.ElectionAllowance. The default renew interval is
// shortened where that makes the election fit before the deadline, and only
// there: at the default TTL, and below 4 s, it stays TTL/3.
func TestDefaultRenewIntervalLeavesRoomForAnEtcdElection(t *testing.T) {
	t.Parallel()
	cases := []struct {
		ttl, wantRenew time.Duration
		ridesOut       bool
	}{
		{2 * time.Second, 2 * time.Second / 3, false}, // no interval fits: TTL − margin is 1.4 s
		{3 * time.Second, time.Second, false},
		{4 * time.Second, 600 * time.Millisecond, true}, // 4 − 1.2 − 2.2
		{5 * time.Second, 1300 * time.Millisecond, true},
		{10 * time.Second, 10 * time.Second / 3, true},
		{30 * time.Second, 10 * time.Second, true},
	}
	for _, tc := range cases {
		ttl, margin, renew := leadership.TimingDefaults(layout.Rules, tc.ttl, 0, 0)
		if renew != tc.wantRenew {
			t.Errorf("TTL %v: default renew interval %v, want %v", ttl, renew, tc.wantRenew)
		}
		if err := leadership.CheckTiming(layout.Rules, ttl, margin, renew); err != nil {
			t.Errorf("TTL %v: the defaults are refused: %v", ttl, err)
		}
		if got := leadership.RidesOutElections(layout.Rules, ttl, margin, renew); got != tc.ridesOut {
			t.Errorf("TTL %v: rides out an election %v, want %v (TTL − margin − renew = %v)", ttl, got, tc.ridesOut, ttl-margin-renew)
		}
	}
	// A margin so wide that the shorter interval would be refused keeps TTL/3:
	// the configuration is refused for its margin, with the usual default named.
	if _, _, renew := leadership.TimingDefaults(layout.Rules, 10*time.Second, 5*time.Second, 0); renew != 10*time.Second/3 {
		t.Errorf("TTL 10s margin 5s: default renew interval %v, want TTL/3", renew)
	}
}
