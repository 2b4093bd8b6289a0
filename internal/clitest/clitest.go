// Package clitest runs the project's commands as processes in tests, the way
// operators and systemd do: each built once per test binary, run to
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

	"github.com/snip/snip-jobs/internal/childproc"
	"github.com/snip/snip-jobs/internal/testenv"
)

// Build builds the main package pkg (an import path, or a path relative to
// the test's package) into dir and returns the binary's path. Without debug
// information (-s -w): a test runs the binary, no debugger does, and the
// link takes a third less.
func Build(dir, pkg, name string) (string, error) {
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("go", "build", "-o", bin, "-ldflags=-s -w", pkg).CombinedOutput(); err != nil {
		return "", errors.New("go build " + pkg + ": " + err.Error() + "\n" + string(out))
	}
	return bin, nil
}

// Binary is a command a test package builds once: its main package (a path
// relative to the test's package), its name, and where its path goes.
type Binary struct {
	Pkg, Name string
	Path      *string
}

// Main builds bins into a temporary folder, runs the tests through
// testenv.RunMain, removes the folder, and returns the exit code for os.Exit.
func Main(m *testing.M, bins ...Binary) int {
	dir, err := os.MkdirTemp("", "snip-jobs-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, b := range bins {
		if *b.Path, err = Build(dir, b.Pkg, b.Name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return testenv.RunMain(m)
}

// Result is a finished command.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run runs bin to completion (bounded by testenv.Patience) with
// childproc.Env's environment plus env.
func Run(t testing.TB, bin string, env []string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
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
