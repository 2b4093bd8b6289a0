package certsync_test

import (
	"os"
	"testing"

	"github.com/snip/snip-jobs/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.MostlyWaiting(4) // waiting for notifications and reload commands
	os.Exit(testenv.RunMain(m))
}
