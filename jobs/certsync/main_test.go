package certsync_test

import (
	"os"
	"testing"

	"github.com/snip/snip-jobs/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m)) }
