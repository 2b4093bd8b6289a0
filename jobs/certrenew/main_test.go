package certrenew_test

import (
	"log/slog"
	"os"
	"testing"

	legolog "github.com/go-acme/lego/v5/log"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

func TestMain(m *testing.M) {
	// lego logs through a process-wide logger (stdout, Info) and ignores the
	// context: silence it here; the renewer logs what matters through run.Log.
	legolog.SetDefault(slog.New(slog.DiscardHandler))
	benchtest.MostlyWaiting(8) // lock-delays, leases and Retry-After waits: ~17 s of CPU in ~41 s
	os.Exit(benchtest.RunMain(m))
}
