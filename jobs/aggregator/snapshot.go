package aggregator

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// snapshot is a PostgreSQL pg_snapshot: which transactions had finished when
// it was taken. A transaction id x is visible in it (finished, committed or
// not) iff x < xmax and x is not in xip; every id below xmin is visible.
type snapshot struct {
	xmin, xmax uint64
	xip        []uint64 // in progress, ascending, each in [xmin, xmax)
}

// parseSnapshot reads pg_snapshot's text form "xmin:xmax:xip1,xip2,...".
func parseSnapshot(s string) (snapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return snapshot{}, fmt.Errorf("snapshot %q: want xmin:xmax:xip", s)
	}
	var sn snapshot
	var err error
	if sn.xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: xmin: %w", s, err)
	}
	if sn.xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return snapshot{}, fmt.Errorf("snapshot %q: xmax: %w", s, err)
	}
	if parts[2] != "" {
		for _, f := range strings.Split(parts[2], ",") {
			x, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return snapshot{}, fmt.Errorf("snapshot %q: xip: %w", s, err)
			}
			sn.xip = append(sn.xip, x)
		}
	}
	if sn.xmin > sn.xmax {
		return snapshot{}, fmt.Errorf("snapshot %q: xmin above xmax", s)
	}
	for _, x := range sn.xip {
		if x < sn.xmin || x >= sn.xmax {
			return snapshot{}, fmt.Errorf("snapshot %q: in-progress id %d outside [xmin, xmax)", s, x)
		}
	}
	slices.Sort(sn.xip)
	return sn, nil
}

func (s snapshot) String() string {
	return fmt.Sprintf("%d:%d:%s", s.xmin, s.xmax, xidList(s.xip, ","))
}

// visible reports whether transaction x had finished when s was taken.
func (s snapshot) visible(x uint64) bool {
	if x >= s.xmax {
		return false
	}
	_, running := slices.BinarySearch(s.xip, x)
	return !running
}

// xidArray is ids as a PostgreSQL array literal, for a $n::text::xid8[]
// parameter.
func xidArray(ids []uint64) string { return "{" + xidList(ids, ",") + "}" }

func xidList(ids []uint64, sep string) string {
	var b strings.Builder
	for i, x := range ids {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(strconv.FormatUint(x, 10))
	}
	return b.String()
}
