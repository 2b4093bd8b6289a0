package fencing_test

import (
	"os"
	"testing"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

func TestMain(m *testing.M) {
	benchtest.MostlyWaiting(8) // writers held on locks, breaks waiting for their answers
	os.Exit(benchtest.RunMain(m))
}
