// Command snip-test is the README's test command: it builds, once, what the
// suite runs beside the code under test (testbench/prepare: the tests'
// kube-apiserver, etcd's oldest supported releases, the previous release,
// the systemd container's root file system) and, beside those builds,
// compiles the packages under test; then it runs `go test` with the
// arguments given (default ./...), passing its output and exit code through.
//
//	go run ./testbench/cmd/snip-test              # the whole suite
//	go run ./testbench/cmd/snip-test -count=1 ./leadership/...
//
// A fresh machine's first builds take longer than go test's per-package
// timeout gives a test that would build them itself; later runs find
// everything in ~/.cache/snip-jobs and start the tests at once. snip-test
// imports only the standard library and the light recipe packages, so that
// it compiles in seconds and the long builds start first.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/testbench/prepare"
)

// parallel is how many packages go test runs at once unless -p says: more
// than this machine's two cores, because the suite's packages mostly wait
// (on leases, processes, timers) rather than compute: at go test's default
// of one per core the cores were half idle (BENCHMARKS.md, "The suite").
const parallel = "-p=3"

func main() {
	args := os.Args[1:]
	only := len(args) > 0 && (args[0] == "--prepare-only" || args[0] == "-prepare-only")
	if only {
		args = args[1:]
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprint(os.Stderr, `usage: go run ./testbench/cmd/snip-test [go test flags] [packages]

Builds what the test suite runs beside the code under test into the user cache
folder (~/.cache/snip-jobs; once: later runs reuse it) and, beside those
builds, compiles the packages under test; then runs go test with the
arguments given (default ./..., the slowest packages first, `+parallel+`
unless -p is given, `+timeout+` unless -timeout is).

  --prepare-only   build what is missing and stop; run no test
`)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, args, only))
}

func run(ctx context.Context, args []string, only bool) int {
	began := time.Now()
	a := splitArgs(args)
	steps := prepare.Steps()
	if !only {
		// First in the releases' lane: compiling beside the kube-apiserver's build.
		steps = append([]prepare.Step{{
			Name:  "the packages under test (compiled)",
			First: "on an empty build cache: 4 to 7 minutes on two cores",
			Build: func(ctx context.Context) (string, error) { return "", compile(ctx, a) },
			Lane:  prepare.Releases,
		}}, steps...)
	}
	fmt.Fprintln(os.Stderr, "snip-test: what the suite runs beside the code (built once into the user cache):")
	if err := prepare.Run(ctx, os.Stderr, steps); err != nil {
		fmt.Fprintln(os.Stderr, "snip-test:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "snip-test: prepared in %v\n", time.Since(began).Round(time.Second))
	if only {
		return 0
	}
	testArgs := append(append([]string{"test"}, a.flags...), a.defaults()...)
	if pkgs, err := packages(ctx, a); err == nil {
		testArgs = append(testArgs, pkgs...)
	} else {
		testArgs = append(testArgs, a.pkgs...)
	}
	testArgs = append(testArgs, a.rest...)
	tests := time.Now()
	cmd := exec.CommandContext(ctx, "go", testArgs...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	err := cmd.Run()
	fmt.Fprintf(os.Stderr, "snip-test: go test took %v (%v in all)\n", time.Since(tests).Round(time.Second), time.Since(began).Round(time.Second))
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, "snip-test:", err)
		return 1
	}
	return 0
}

// coldCompile is how long compiling the packages under test must take for
// snip-test to take the cache for cold (a fresh machine, or a change low in
// the tree) and compile the tests themselves too before go test starts.
const coldCompile = 30 * time.Second

// compile builds every package the tests import into Go's build cache: on a
// fresh machine minutes of work that go test then finds done. On a warm cache
// it only checks, in a second or two. When that took long, it also compiles
// and vets each package's tests and links their binaries, running none
// (go test -exec true): on a fresh machine, go test otherwise compiled them
// while running the first packages' tests three at a time, and the load
// starved the kube-apiserver and PostgreSQL of those tests for seconds
// (leases lapsed; seen once in two fresh runs). The links are done twice
// then (go test does not keep them): about half a minute of the two cores.
func compile(ctx context.Context, a testArgs) error {
	began := time.Now()
	patterns := a.patterns()
	const libs = `{{if and (not .Standard) (not .ForTest) (ne .Name "main") (or .GoFiles .CgoFiles)}}{{.ImportPath}}{{end}}`
	list := exec.CommandContext(ctx, "go", append([]string{"list", "-e", "-deps", "-test", "-f", libs}, patterns...)...)
	out, err := list.Output()
	if err != nil {
		return fmt.Errorf("go list: %w", err)
	}
	goCmd(ctx, append(append([]string{"build"}, a.buildFlags()...), strings.Fields(string(out))...))
	if time.Since(began) < coldCompile {
		return nil
	}
	// -vet as given: go test's own vet, whose results are cached for it.
	flags := append(append([]string{"test", "-count=1", "-run=^$", "-exec=true"}, a.buildFlags()...), a.pick("vet")...)
	goCmd(ctx, append(flags, patterns...))
	return nil
}

// goCmd runs go with args, its output discarded but for the errors, which it
// reports: go test compiles again and fails where the error belongs.
func goCmd(ctx context.Context, args []string) {
	cmd := exec.CommandContext(ctx, "go", args...)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "snip-test: go %s: %v\n%s", args[0], err, stderr.String())
	}
}
