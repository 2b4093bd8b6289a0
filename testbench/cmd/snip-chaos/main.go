// Command snip-chaos runs the fault-injection suite (package chaos) against
// real snip-jobs processes and prints its results table: see docs/chaos.md.
//
//	go run ./testbench/cmd/snip-chaos -faults 200
//	go run ./testbench/cmd/snip-chaos -backend kubernetes -faults 100
//
// It exits 0 when no invariant was violated, 1 when one was (or the run
// failed), 2 on bad usage. With -soak it runs the cluster under load for
// that long instead, with a light fault every -fault-every, samples every
// resource a leak would grow, and exits 1 on a trend beyond its bound too:
//
//	go run ./testbench/cmd/snip-chaos -soak 2h -out soak.md -plot soak.svg `snip-chaos etcd-member ...` is how the harness
//
// runs each etcd member as a process of its own.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/testbench/chaos"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == chaos.MemberCommand {
		os.Exit(chaos.MemberMain(os.Args[2:]))
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("snip-chaos", flag.ContinueOnError)
	faults := fs.Int("faults", 200, "how many faults to inject (the first ones cover every kind once)")
	seed := fs.Uint64("seed", 0, "seed of the random draws (0: from the clock)")
	ttl := fs.Duration("ttl", 2*time.Second, "the instances' lease TTL (margin TTL/4, keep-alives every TTL/5)")
	defTiming := fs.Bool("default-timing", false, "leave margin and renew interval to snip-jobs' defaults for the TTL")
	backend := fs.String("backend", string(chaos.BackendEtcd), "the instances' leadership backend: etcd (three members) or kubernetes (Leases on a kube-apiserver)")
	kinds := fs.String("kinds", "", "comma-separated fault kinds to draw from (default all of the backend's: etcd: "+
		kindList(chaos.BackendEtcd)+"; kubernetes: "+kindList(chaos.BackendKubernetes)+")")
	broken := fs.Bool("broken", false, "build snip-jobs with testbench/chaos/broken.go's patches (stop-early margin 0, no fence check)")
	brokenManual := fs.Bool("broken-manual", false, "build snip-jobs with testbench/chaos/broken.go's manual patch (the weekly report's manual run completed after the run, apart from its effect)")
	manualJobs := fs.String("manual-jobs", "", "comma-separated jobs the manual-run faults ask runs of (default probe, weekly-report, cert-renewer)")
	afterEffect := fs.Bool("manual-after-effect", false, "every manual-run fault strikes the claimer once its run's effect committed")
	stop := fs.Bool("stop-at-violation", false, "stop injecting at the first write (of any job) accepted out of token order")
	keep := fs.Bool("keep", false, "keep the run's folder (logs, configs, data)")
	out := fs.String("out", "", "also write the Markdown report to this file")
	jsonOut := fs.String("json", "", "also write the whole report (every fault) as JSON to this file")
	render := fs.String("render", "", "render the Markdown of a report written with -json, and run nothing")
	soak := fs.Duration("soak", 0, "run a soak this long instead of a number of faults: the cluster under load, a light fault every -fault-every, every resource sampled; fails on a trend")
	faultEvery := fs.Duration("fault-every", 3*time.Minute, "with -soak: the time between faults")
	sampleEvery := fs.Duration("sample-every", 0, "with -soak: the time between samples (default a minute, or the soak/30 when shorter)")
	plot := fs.String("plot", "", "with -soak: also write the samples as an SVG plot to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *render != "" {
		return renderJSON(*render)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	o := chaos.Options{Faults: *faults, Seed: *seed, TTL: *ttl, DefaultTiming: *defTiming, Broken: *broken, BrokenManual: *brokenManual, ManualAfterEffect: *afterEffect, StopAtViolation: *stop, KeepDir: *keep, Log: log,
		Backend: chaos.Backend(*backend)}
	if !slices.Contains(chaos.Backends, o.Backend) {
		fmt.Fprintf(os.Stderr, "snip-chaos: unknown backend %q (known: %s, %s)\n", o.Backend, chaos.BackendEtcd, chaos.BackendKubernetes)
		return 2
	}
	o.ManualJobs = list(*manualJobs)
	for _, k := range list(*kinds) {
		if !slices.Contains(o.Backend.Kinds(), chaos.Kind(k)) {
			fmt.Fprintf(os.Stderr, "snip-chaos: unknown fault kind %q on the %s backend (known: %s)\n", k, o.Backend, kindList(o.Backend))
			return 2
		}
		o.Kinds = append(o.Kinds, chaos.Kind(k))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if *soak > 0 {
		return runSoak(ctx, chaos.SoakOptions{Options: o, Duration: *soak, FaultEvery: *faultEvery, SampleEvery: *sampleEvery}, *out, *jsonOut, *plot)
	}
	rep, err := chaos.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "snip-chaos:", err)
		return 1
	}
	md := rep.Markdown()
	fmt.Print(md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "snip-chaos:", err)
			return 1
		}
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "snip-chaos:", err)
			return 1
		}
	}
	if len(rep.Violations) > 0 {
		return 1
	}
	return 0
}

// runSoak runs a soak and writes its table, its JSON and its plot.
func runSoak(ctx context.Context, o chaos.SoakOptions, out, jsonOut, plot string) int {
	rep, err := chaos.Soak(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "snip-chaos:", err)
		return 1
	}
	md := rep.Markdown() + "\n" + rep.Run.Markdown()
	fmt.Print(md)
	b, _ := json.MarshalIndent(rep, "", "  ")
	for _, f := range []struct{ path, body string }{{out, md}, {jsonOut, string(b)}, {plot, rep.Plot()}} {
		if f.path == "" {
			continue
		}
		if err := os.WriteFile(f.path, []byte(f.body), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "snip-chaos:", err)
			return 1
		}
	}
	if len(rep.Failed()) > 0 {
		return 1
	}
	return 0
}

// renderJSON prints the Markdown of a report written with -json.
func renderJSON(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "snip-chaos:", err)
		return 1
	}
	var rep chaos.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		fmt.Fprintln(os.Stderr, "snip-chaos:", path+":", err)
		return 1
	}
	fmt.Print(rep.Markdown())
	return 0
}

// list splits a comma-separated flag ("": none).
func list(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func kindList(b chaos.Backend) string {
	var s []string
	for _, k := range b.Kinds() {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}
