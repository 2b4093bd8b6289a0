package aggregator

import (
	"errors"
	"slices"
	"testing"
)

func TestSnapshotTextRoundTripsAndSaysWhatIsVisible(t *testing.T) {
	t.Parallel()
	s, err := parseSnapshot("10:20:15,12")
	if err != nil {
		t.Fatal(err)
	}
	if s.xmin != 10 || s.xmax != 20 || !slices.Equal(s.xip, []uint64{12, 15}) {
		t.Fatalf("parsed %+v", s)
	}
	if got := s.String(); got != "10:20:12,15" {
		t.Errorf("String() = %q", got)
	}
	for x, want := range map[uint64]bool{1: true, 10: true, 11: true, 12: false, 15: false, 19: true, 20: false, 25: false} {
		if got := s.visible(x); got != want {
			t.Errorf("visible(%d) = %v, want %v", x, got, want)
		}
	}
	for _, bad := range []string{"", "1:2", "a:2:", "3:2:", "1:5:7", "1:5:0", "1:5:x"} {
		if _, err := parseSnapshot(bad); err == nil {
			t.Errorf("parseSnapshot(%q) accepted it", bad)
		}
	}
}

func TestATargetMustIncludeEverythingThePreviousSnapshotDid(t *testing.T) {
	t.Parallel()
	mustParse := func(s string) snapshot {
		sn, err := parseSnapshot(s)
		if err != nil {
			t.Fatal(err)
		}
		return sn
	}
	for _, tc := range []struct {
		prev, target string
		ok           bool
	}{
		{"1:1:", "5:9:6", true},
		{"10:20:12,15", "12:25:12,21", true}, // 12 still running, 15 finished
		{"10:20:12", "10:20:12", true},       // nothing new
		{"10:20:", "10:19:", false},          // xmax went back
		{"10:20:", "10:25:15", false},        // 15 had finished in prev
	} {
		err := checkLater(mustParse(tc.prev), mustParse(tc.target))
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errNotLater)) {
			t.Errorf("checkLater(%s, %s) = %v, want ok=%v", tc.prev, tc.target, err, tc.ok)
		}
	}
}

func TestTheSpanFollowsTheDensityOfEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		span uint64
		res  batchResult
		want uint64
	}{
		{"empty range widens fast", 100, batchResult{lo: 0, hi: 100}, 6400},
		{"empty window says nothing", 100, batchResult{lo: 0, hi: 10, clipped: true}, 100},
		{"twice too many halves it", 100, batchResult{lo: 0, hi: 100, seen: 2000}, 50},
		{"a tenth widens it tenfold", 100, batchResult{lo: 0, hi: 100, seen: 100}, 1000},
		{"far too many narrows at most 16 times", 160, batchResult{lo: 0, hi: 160, seen: 1_000_000}, 10},
		{"a short window with few events says nothing", 100, batchResult{lo: 0, hi: 10, seen: 5, clipped: true}, 100},
		{"a short window with too many narrows", 100, batchResult{lo: 0, hi: 10, seen: 2000, clipped: true}, 5},
		{"never below 1", 1, batchResult{lo: 0, hi: 1, seen: 1_000_000}, 1},
	} {
		if got := nextSpan(tc.span, tc.res, 1000); got != tc.want {
			t.Errorf("%s: nextSpan = %d, want %d", tc.name, got, tc.want)
		}
	}
}
