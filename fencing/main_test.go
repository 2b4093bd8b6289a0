package fencing_test

import (
	"os"
	"testing"

	"github.com/snip/snip-jobs/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.MostlyWaiting(8) // writers held on locks, breaks waiting for their answers
	os.Exit(testenv.RunMain(m))
}
