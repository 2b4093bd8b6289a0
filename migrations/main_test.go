package migrations

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

// childURLEnv, when set, makes the test binary a child process that runs Up
// once on that database (see TestUpFromThreeProcesses) instead of the tests.
const childURLEnv = "SNIP_MIGRATIONS_CHILD_URL"

func TestMain(m *testing.M) {
	if url := os.Getenv(childURLEnv); url != "" {
		os.Exit(childMain(url))
	}
	benchtest.MostlyWaiting(4) // processes and clusters starting, locks held
	os.Exit(benchtest.RunMain(m))
}

// childOutput is what a child process prints on stdout.
type childOutput struct {
	Result Result
	Err    string
}

// childMain waits until its stdin is closed (the parent's start gate, so that
// the children call Up at the same moment), runs Up, and prints the outcome as
// JSON.
func childMain(url string) int {
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		fmt.Fprintf(os.Stderr, "child: read stdin: %v\n", err)
		return 2
	}
	res, err := Up(context.Background(), url, nil)
	out := childOutput{Result: res}
	if err != nil {
		out.Err = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "child: write result: %v\n", err)
		return 2
	}
	return 0
}
