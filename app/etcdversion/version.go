// Package etcdversion knows which etcd releases snip-jobs supports: the
// oldest release of each line with the lease fixes the guarantee depends on.
// Only the standard library, so that the test bench's preparation can read
// the table without compiling the etcd client.
package etcdversion

import (
	"strconv"
	"strings"
)

// Minimum is the oldest etcd release of each supported line: the first with
// the fixes of the lease bugs that could give two terms at once
// (docs/operations.md, "etcd versions"). 3.7.0 already carries every one of
// them (its lessor is 3.6.16's). Later lines are assumed to carry them.
var Minimum = [][3]int{{3, 5, 23}, {3, 6, 5}, {3, 7, 0}}

// BelowMinimum reports whether version ("3.5.12") is older than the minimum
// of its line (or of a line older than every supported one), and that
// minimum. A version it cannot read is not reported.
func BelowMinimum(version string) (minimum string, below bool) {
	v, ok := parse(version)
	if !ok {
		return "", false
	}
	for _, m := range Minimum {
		if v[0] == m[0] && v[1] == m[1] {
			return format(m), less(v, m)
		}
	}
	first := Minimum[0]
	return format(first), less(v, first)
}

func parse(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.SplitN(strings.TrimPrefix(s, "v"), ".", 3)
	if len(parts) != 3 {
		return v, false
	}
	parts[2], _, _ = strings.Cut(parts[2], "-") // 3.6.0-rc.1
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func format(v [3]int) string {
	return strconv.Itoa(v[0]) + "." + strconv.Itoa(v[1]) + "." + strconv.Itoa(v[2])
}
