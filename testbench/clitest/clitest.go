// Package clitest runs the project's commands as processes in tests, the way
// operators and systemd do: each linked once per checkout, run to
// completion in an environment without the developer's own snip-jobs
// settings.
package clitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/childproc"
	"github.com/snip/snip-jobs/testbench/gobuild"
)

// Binary is a command a test package builds once: its main package (a path
// relative to the test's package), its name, and where its path goes.
type Binary struct {
	Pkg, Name string
	Path      *string
}

// Main builds bins (gobuild.Shared: linked once for every test binary of the
// checkout), runs the tests through benchtest.RunMain, and returns the exit
// code for os.Exit.
func Main(m *testing.M, bins ...Binary) int {
	for _, b := range bins {
		dir, err := filepath.Abs(b.Pkg)
		if err == nil {
			*b.Path, err = gobuild.Shared(context.Background(), dir, b.Name)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return benchtest.RunMain(m)
}

// Result is a finished command.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run runs bin to completion (bounded by benchtest.Patience) with
// childproc.Env's environment plus env.
func Run(t testing.TB, bin string, env []string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = childproc.Env(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", filepath.Base(bin), args, err)
	}
	return r
}

// LinesWith returns the lines of s that contain every one of subs.
func LinesWith(s string, subs ...string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		ok := true
		for _, sub := range subs {
			ok = ok && strings.Contains(line, sub)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}
