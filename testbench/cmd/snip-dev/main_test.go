package main

import (
	"os"
	"testing"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/clitest"
)

// snipDevBin and snipJobsBin are the two binaries, built once by TestMain;
// the tests run snip-dev as a developer does, with the instances on
// snipJobsBin.
var snipDevBin, snipJobsBin string

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m,
		clitest.Binary{Pkg: ".", Name: "snip-dev", Path: &snipDevBin},
		clitest.Binary{Pkg: "../../../cmd/snip-jobs", Name: "snip-jobs", Path: &snipJobsBin}))
}

// waitLong bounds waiting on processes: how long a broken setup takes to
// fail, never whether a working one passes.
const waitLong = benchtest.Patience

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	benchtest.Eventually(t, what, cond)
}

// snip runs snip-jobs to completion.
func snip(t *testing.T, args ...string) clitest.Result {
	t.Helper()
	return clitest.Run(t, snipJobsBin, nil, args...)
}

// dev runs snip-dev to completion, on the built snip-jobs.
func dev(t *testing.T, args ...string) clitest.Result {
	t.Helper()
	return clitest.Run(t, snipDevBin, nil, append(args, "--snip-jobs", snipJobsBin)...)
}
