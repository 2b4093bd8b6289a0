package certsync_test

import (
	"os"
	"testing"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

func TestMain(m *testing.M) {
	benchtest.MostlyWaiting(4) // waiting for notifications and reload commands
	os.Exit(benchtest.RunMain(m))
}
