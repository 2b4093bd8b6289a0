package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/snip/snip-jobs/internal/clitest"
	"github.com/snip/snip-jobs/internal/testenv"
)

// snipDevBin and snipJobsBin are the two binaries, built once by TestMain; the
// tests run snip-dev as a developer does, with the instances on snipJobsBin.
var snipDevBin, snipJobsBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "snip-dev-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if snipDevBin, err = clitest.Build(dir, ".", "snip-dev"); err == nil {
		snipJobsBin, err = clitest.Build(dir, "../snip-jobs", "snip-jobs")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := testenv.RunMain(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// waitLong bounds waiting on processes: how long a broken setup takes to
// fail, never whether a working one passes.
const waitLong = testenv.Patience

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, cond)
}

// result is a finished command.
type result struct {
	code           int
	stdout, stderr string
}

// snip runs snip-jobs to completion.
func snip(t *testing.T, env []string, args ...string) result {
	t.Helper()
	r := clitest.Run(t, snipJobsBin, env, args...)
	return result{code: r.Code, stdout: r.Stdout, stderr: r.Stderr}
}

// dev runs snip-dev to completion, on the built snip-jobs.
func dev(t *testing.T, args ...string) result {
	t.Helper()
	r := clitest.Run(t, snipDevBin, nil, append(args, "--snip-jobs", snipJobsBin)...)
	return result{code: r.Code, stdout: r.Stdout, stderr: r.Stderr}
}

func linesWith(s string, subs ...string) []string { return clitest.LinesWith(s, subs...) }
