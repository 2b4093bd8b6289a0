package benchtest

import (
	"flag"
	"strconv"
)

// MostlyWaiting sets -test.parallel to n unless the command line gives it.
// For a package whose tests mostly wait (for leases to expire, members to
// elect, processes to start) rather than compute: go test's default, one
// test per core, leaves a 2-core machine idle while they wait. Call it first
// in TestMain; it parses the command line.
func MostlyWaiting(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
