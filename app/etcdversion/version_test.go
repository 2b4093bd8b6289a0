package etcdversion

import "testing"

func TestBelowMinimumComparesWithinEachSupportedLine(t *testing.T) {
	for _, tc := range []struct {
		version, minimum string
		below            bool
	}{
		{"3.5.12", "3.5.23", true},  // before the fix of etcd-io/etcd#15247
		{"3.5.22", "3.5.23", true},  // before #20590
		{"3.5.23", "3.5.23", false}, // the minimum itself
		{"3.5.35", "3.5.23", false},
		{"3.6.0", "3.6.5", true},
		{"3.6.16", "3.6.5", false},
		{"3.4.40", "3.5.23", true}, // an older line
		{"3.7.0", "3.7.0", false},  // 3.7's minimum: its first release
		{"3.7.3", "3.7.0", false},
		{"3.8.0", "3.5.23", false}, // a newer line
		{"3.6.0-rc.1", "3.6.5", true},
		{"not a version", "", false},
	} {
		minimum, below := BelowMinimum(tc.version)
		if below != tc.below || minimum != tc.minimum {
			t.Errorf("BelowMinimum(%q) = %q, %v; want %q, %v", tc.version, minimum, below, tc.minimum, tc.below)
		}
	}
}
