package main

import (
	"context"
	"os/exec"
	"slices"
	"strings"
)

// testArgs is snip-test's command line split the way go test reads it:
// flags (with their values), package patterns, and what follows -args.
type testArgs struct {
	flags, pkgs, rest []string
}

// valueFlags are go test's and go build's flags that take the next argument
// as their value when written without "=" (-p 4, -run TestX).
var valueFlags = map[string]bool{
	"bench": true, "benchtime": true, "blockprofile": true, "blockprofilerate": true, "count": true,
	"coverpkg": true, "covermode": true, "coverprofile": true, "cpu": true, "cpuprofile": true,
	"exec": true, "fuzz": true, "fuzzminimizetime": true, "fuzztime": true, "gcflags": true,
	"ldflags": true, "list": true, "memprofile": true, "memprofilerate": true, "mod": true,
	"mutexprofile": true, "mutexprofilefraction": true, "o": true, "outputdir": true, "overlay": true,
	"p": true, "parallel": true, "run": true, "shuffle": true, "skip": true, "tags": true,
	"timeout": true, "trace": true, "vet": true, "asmflags": true, "toolexec": true, "C": true,
}

func splitArgs(args []string) testArgs {
	var a testArgs
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "-args" || arg == "--args":
			a.rest = args[i:]
			return a
		case strings.HasPrefix(arg, "-"):
			a.flags = append(a.flags, arg)
			name := strings.TrimLeft(arg, "-")
			if !strings.Contains(name, "=") && valueFlags[name] && i+1 < len(args) {
				i++
				a.flags = append(a.flags, args[i])
			}
		default:
			a.pkgs = append(a.pkgs, arg)
		}
	}
	return a
}

// has reports whether flag (without dashes) was given.
func (a testArgs) has(flag string) bool {
	return slices.ContainsFunc(a.flags, func(f string) bool {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		return strings.HasPrefix(f, "-") && name == flag
	})
}

// timeout is each test binary's limit unless -timeout says: at load 30 on
// two cores cmd/snip-jobs ran past go test's default of 10 minutes (616 s,
// its Debian package test 8 of them), where it takes 2 on an idle machine.
const timeout = "-timeout=30m"

// defaults are the flags snip-test adds to those given: -p and -timeout,
// unless given.
func (a testArgs) defaults() []string {
	var out []string
	if !a.has("p") {
		out = append(out, parallel)
	}
	if !a.has("timeout") {
		out = append(out, timeout)
	}
	return out
}

// buildFlags are the flags that change how packages compile (so that the
// early compile fills the cache go test then reads).
func (a testArgs) buildFlags() []string {
	return a.pick("race", "msan", "asan", "cover", "trimpath", "tags", "gcflags", "asmflags", "mod", "overlay", "coverpkg", "covermode")
}

// pick returns the flags named (without dashes), each with its value, as
// given.
func (a testArgs) pick(names ...string) []string {
	var out []string
	for i := 0; i < len(a.flags); i++ {
		f := a.flags[i]
		name, _, inline := strings.Cut(strings.TrimLeft(f, "-"), "=")
		takesValue := !inline && valueFlags[name] && i+1 < len(a.flags)
		if slices.Contains(names, name) {
			out = append(out, f)
			if takesValue {
				out = append(out, a.flags[i+1])
			}
		}
		if takesValue {
			i++
		}
	}
	return out
}

// patterns are the packages named, or ./... when none is.
func (a testArgs) patterns() []string {
	if len(a.pkgs) == 0 {
		return []string{"./..."}
	}
	return a.pkgs
}

// slowest are the packages whose tests take longest, in that order
// (BENCHMARKS.md, "The suite"): started first, they run beside the many short
// ones instead of alone at the end, while the other slots idle.
var slowest = []string{
	"cmd/snip-jobs", "testbench/chaos", "deploy/release", "testbench/cmd/snip-dev", "leadership/kubelease", "jobs/certrenew", "scheduler",
	"leadership/etcdlease", "testbench/etcdtest", "jobs/certrenew/certserve", "fencing", "deploy/prometheus", "jobs/weeklyreport",
}

// packages lists the packages go test will run: the patterns given (default
// ./...) expanded, the slowest first; go test starts them in that order.
func packages(ctx context.Context, a testArgs) ([]string, error) {
	out, err := exec.CommandContext(ctx, "go", append([]string{"list"}, a.patterns()...)...).Output()
	if err != nil {
		return nil, err
	}
	pkgs := strings.Fields(string(out))
	const module = "github.com/snip/snip-jobs/"
	rank := func(p string) int {
		if i := slices.Index(slowest, strings.TrimPrefix(p, module)); i >= 0 {
			return i
		}
		return len(slowest)
	}
	slices.SortStableFunc(pkgs, func(a, b string) int { return rank(a) - rank(b) })
	return pkgs, nil
}
