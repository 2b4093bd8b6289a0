// Command snip-test is the README's test command: it builds, once, what the
// suite runs beside the code under test (testbench/prepare: the tests'
// kube-apiserver, etcd's oldest supported releases, the previous release,
// the systemd container's root file system), then runs `go test` with the
// arguments given (default ./...), passing its output and exit code through.
//
//	go run ./cmd/snip-test              # the whole suite
//	go run ./cmd/snip-test -count=1 ./leadership/...
//
// A fresh machine's first builds take longer than go test's per-package
// timeout gives a test that would build them itself; later runs find
// everything in ~/.cache/snip-jobs and start the tests at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/testbench/prepare"
)

func main() {
	flag.Usage = func() {
		fmt.Fprint(os.Stderr, `usage: go run ./cmd/snip-test [go test flags] [packages]

Builds what the test suite runs beside the code under test into the user cache
folder (~/.cache/snip-jobs; once: later runs reuse it), then runs
go test with the arguments given (default ./...).

  --prepare-only   build what is missing and stop; run no test
`)
	}
	args := os.Args[1:]
	only := len(args) > 0 && (args[0] == "--prepare-only" || args[0] == "-prepare-only")
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		flag.Usage()
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	began := time.Now()
	fmt.Fprintln(os.Stderr, "snip-test: what the suite runs beside the code (built once into the user cache):")
	if err := prepare.Run(ctx, os.Stderr, prepare.Steps()); err != nil {
		fmt.Fprintln(os.Stderr, "snip-test:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "snip-test: prepared in %v\n", time.Since(began).Round(time.Second))
	if only {
		return
	}
	args = slowestFirst(ctx, args)
	tests := time.Now()
	cmd := exec.CommandContext(ctx, "go", append([]string{"test"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	err := cmd.Run()
	fmt.Fprintf(os.Stderr, "snip-test: go test took %v (%v in all)\n", time.Since(tests).Round(time.Second), time.Since(began).Round(time.Second))
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "snip-test:", err)
		os.Exit(1)
	}
}

// slowest are the packages whose tests take longest, in that order
// (BENCHMARKS.md, "The suite"): started first, they run beside the many short
// ones instead of alone at the end, while the other core idles.
var slowest = []string{
	"testbench/chaos", "cmd/snip-jobs", "cmd/snip-dev", "leadership/etcdlease", "leadership/kubelease",
	"deploy/prometheus", "scheduler", "testbench/etcdtest", "jobs/certrenew/certserve", "jobs/certrenew", "fencing",
}

// slowestFirst returns args with ./... (the default when no package is
// named) expanded and the slowest packages moved to its front; go test
// starts the packages in the order given. Other package arguments are left
// as they are.
func slowestFirst(ctx context.Context, args []string) []string {
	var flags []string
	named := false
	for _, a := range args {
		switch {
		case a == "./...":
		case strings.HasPrefix(a, "-"):
			flags = append(flags, a)
			continue
		default:
			named = true
		}
	}
	if named {
		return args
	}
	out, err := exec.CommandContext(ctx, "go", "list", "./...").Output()
	if err != nil {
		return append(flags, "./...")
	}
	pkgs := strings.Fields(string(out))
	const module = "github.com/snip/snip-jobs/"
	rank := func(p string) int {
		for i, s := range slowest {
			if p == module+s {
				return i
			}
		}
		return len(slowest)
	}
	slices.SortStableFunc(pkgs, func(a, b string) int { return rank(a) - rank(b) })
	return append(flags, pkgs...)
}
