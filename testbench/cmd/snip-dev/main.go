// Command snip-dev runs a whole local Snip jobs cluster in one command, for
// trying snip-jobs out and for development: a throwaway PostgreSQL, an
// embedded etcd, an in-process ACME test CA (Pebble) with its DNS, a stand-in
// for Snip's web tier, and three snip-jobs instances as child processes, each
// running the demo jobs. It is the test bench, not the product: nothing of it
// links into the snip-jobs binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/snip/snip-jobs/jobs/builtin"
	"github.com/snip/snip-jobs/testbench/devcluster"
)

const about = `Runs a local Snip jobs cluster, for trying things out and for development:
a throwaway PostgreSQL from the machine's server binaries (Debian's
postgresql-15), migrated and filled with demo data (links, two weeks of click
counts, custom domains, a stream of clicks on one viral link), an embedded
etcd (or, with --backend kubernetes, a local kube-apiserver), an ACME test CA (Pebble) whose certificates a stand-in for Snip's web
tier serves over HTTPS, and three snip-jobs instances as child processes, each
running the demo jobs. It prints where each instance's status page is and how
to break things: kill or pause (SIGSTOP) the leader of a job, make it resign,
restart an instance — as commands to paste, and as buttons on the pages. Then
it narrates every change of leader until Ctrl-C, which stops the instances
(SIGTERM, then SIGKILL after 10s) and removes everything it created. A second
Ctrl-C kills the instances at once.

The instances run the snip-jobs binary given with --snip-jobs; without it,
snip-dev builds one from this module (go build ./cmd/snip-jobs, into a
temporary folder removed at the end). Nothing is installed and nothing outside
the temporary directory is written. It needs no config file and reads none.
Everything listens on 127.0.0.1 only: it is for a developer's machine, never a
server.

Usage: snip-dev [flags]   (from the repository: go run ./testbench/cmd/snip-dev)

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is snip-dev with its arguments; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("snip-dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, about); fs.PrintDefaults() }
	base := fs.Int("http-base", devcluster.DefaultHTTPBase,
		"the supervisor listens on 127.0.0.1:PORT, the instances on PORT+1, PORT+2, ...\n(a port in use is replaced by a free one); -1 picks free ports for all")
	instances := fs.Int("instances", devcluster.DefaultInstances, "how many instances to run")
	ttl := fs.Duration("ttl", devcluster.DefaultTTL, "the instances' lease TTL: how long a killed leader's jobs wait for a successor")
	bindir := fs.String("pg-bindir", "", "folder of PostgreSQL's initdb and postgres\n(default: pg_config --bindir, else /usr/lib/postgresql/15/bin)")
	logs := fs.Bool("logs", false, "also print the instances' logs here, each line prefixed with its instance\n(they are always written to files in the cluster's folder)")
	binary := fs.String("snip-jobs", "", "the snip-jobs binary the instances run (default: built from this module with go build)")
	backend := fs.String("backend", devcluster.BackendEtcd, "where the instances keep their terms: etcd (an embedded member) or kubernetes\n(a local kube-apiserver: the binary the kubernetes backend's tests build into\n~/.cache/snip-jobs, which must be there already)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(msg string) int { fmt.Fprintln(stderr, "snip-dev: "+msg); return 2 }
	switch {
	case fs.NArg() > 0:
		return usage("takes no arguments")
	case *instances < 1 || *instances > 9:
		return usage("--instances must be from 1 to 9")
	case *base == 0 || *base > 65535-*instances:
		return usage("--http-base must be a port (or -1 for free ports)")
	case *ttl < 2*time.Second || *ttl%time.Second != 0:
		return usage("--ttl must be whole seconds, at least 2s (etcd's lease granularity)")
	case *backend != devcluster.BackendEtcd && *backend != devcluster.BackendKubernetes:
		return usage(fmt.Sprintf("--backend %q: want %s or %s", *backend, devcluster.BackendEtcd, devcluster.BackendKubernetes))
	}
	exe, self, cleanup, err := snipJobs(ctx, *binary, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "snip-dev: "+err.Error())
		return 1
	}
	defer cleanup()
	cfg := devcluster.Config{HTTPBase: *base, Instances: *instances, TTL: *ttl, PGBindir: *bindir, Executable: exe, Backend: *backend}
	if err := runDev(ctx, stdout, stderr, cfg, self, *logs); err != nil {
		fmt.Fprintln(stderr, "snip-dev: "+err.Error())
		return 1
	}
	return 0
}

// snipJobs returns the snip-jobs binary to run (given, or built from this
// module), how the banner should tell the developer to run it, and what
// removes what was built.
func snipJobs(ctx context.Context, given string, out io.Writer) (exe, self string, cleanup func(), err error) {
	if given != "" {
		abs, err := filepath.Abs(given)
		if err != nil {
			return "", "", nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", "", nil, fmt.Errorf("--snip-jobs: %w", err)
		}
		return abs, abs, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "snip-jobs-dev-bin-")
	if err != nil {
		return "", "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	// A folder named like the cluster's, with this process's pid: removed by
	// the next snip-dev if this one dies without cleaning up.
	if err := os.WriteFile(filepath.Join(dir, "dev.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		cleanup()
		return "", "", nil, err
	}
	fmt.Fprintln(out, "snip-dev: building snip-jobs (go build ./cmd/snip-jobs)")
	exe = filepath.Join(dir, "snip-jobs")
	build := exec.CommandContext(ctx, "go", "build", "-o", exe, "github.com/snip/snip-jobs/cmd/snip-jobs")
	if b, err := build.CombinedOutput(); err != nil {
		cleanup()
		return "", "", nil, fmt.Errorf("building snip-jobs (run from the repository, or pass --snip-jobs): %v\n%s", err, b)
	}
	return exe, "go run ./cmd/snip-jobs", cleanup, nil
}

// runDev starts the cluster, prints the banner, narrates until ctx ends (the
// first Ctrl-C), then stops and removes everything.
func runDev(ctx context.Context, stdout, stderr io.Writer, cfg devcluster.Config, self string, logs bool) error {
	cfg.Types = builtin.Registry()
	cfg.Out = stdout
	cfg.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if logs {
		cfg.ChildOutput = stderr
	}

	// After the first signal, a second one kills the instances at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	fmt.Fprintln(stdout, "snip-dev: starting a local cluster (Ctrl-C stops it and removes everything)")
	cluster, err := devcluster.Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stdout, "stopped during start-up; everything it created is removed")
			return nil
		}
		return err
	}
	printBanner(stdout, cluster, self)
	cluster.Narrate()

	// Each signal reaches both ctx and sigs: count them on sigs, so that the
	// one that ended ctx is not taken for a second one.
	seen := 0
	select {
	case <-sigs:
		seen++
	case <-ctx.Done():
	}
	fmt.Fprintf(stdout, "\nstopping: SIGTERM to the instances (SIGKILL after %v; Ctrl-C again to kill them now)\n", devcluster.StopBound)
	dir, pgdir := cluster.Dir(), cluster.PostgresDir()
	closed := make(chan error, 1)
	go func() { closed <- cluster.Close(context.Background()) }()
	for {
		select {
		case err := <-closed:
			if err != nil {
				fmt.Fprintf(stdout, "stopped, with problems: %v\n", err)
			}
			fmt.Fprintf(stdout, "stopped; removed %s and %s\n", dir, pgdir)
			return nil
		case <-sigs:
			if seen++; seen >= 2 {
				fmt.Fprintln(stdout, "killing the instances now")
				cluster.KillAll()
			}
		}
	}
}

func printBanner(w io.Writer, c *devcluster.Cluster, self string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	jobs := c.Jobs()
	var names []string
	example, runnable, certs := "", "", false
	for _, j := range jobs {
		certs = certs || j.Type == "certrenew"
		kind := "singleton"
		if !j.Singleton {
			kind = "everywhere"
		} else if example == "" {
			example = j.Name
		}
		if j.Singleton && runnable == "" && j.Type == "sql" {
			runnable = j.Name // the heartbeat: an interval job (continuous ones have no "run once now")
		}
		names = append(names, fmt.Sprintf("%s (%s, %s)", j.Name, j.Type, kind))
	}
	instances := c.Instances()
	first := instances[0]

	p("")
	p("snip-dev: a local Snip jobs cluster, up in %v. Ctrl-C stops it and removes everything.", c.Started().Round(100*time.Millisecond))
	p("")
	row := func(label, format string, args ...any) { p("  %-12s%s", label, fmt.Sprintf(format, args...)) }
	row("PostgreSQL", "%s  (%s; data in %s)", c.DatabaseURL(), c.PostgresBindir(), c.PostgresDir())
	label, where := c.Backend()
	row(label, "%s", where)
	files := "configs, logs, etcd's data"
	if label != devcluster.BackendEtcd {
		files = "configs, logs, the API server's token"
	}
	row("files", "%s  (%s)", c.Dir(), files)
	row("jobs", "%s", strings.Join(names, ", "))
	for i, l := range c.LeftOut() {
		label := ""
		if i == 0 {
			label = "not yet"
		}
		row(label, "%s", l)
	}
	domains := "no custom_domains table yet"
	if n := c.Domains(); n > 0 {
		domains = fmt.Sprintf("%d custom domains", n)
	}
	row("demo data", "5 links, two weeks of hourly counts, %s;", domains)
	row("", "a stream of clicks on /launch-video into %s", c.ClicksGoTo())

	p("")
	p("Status pages, one per instance (each shows the whole cluster; %s/ opens the first that runs):", c.ControlURL())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, in := range instances {
		fmt.Fprintf(tw, "  %s\t%s\tpid %d\tlog %s\n", in.Name, in.Page, in.PID, in.Log)
	}
	tw.Flush()

	ctl := c.ControlURL()
	p("")
	p("Break things (or press the buttons on the pages):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if example != "" {
		fmt.Fprintf(tw, "  kill the leader of a job\tcurl -X POST '%s/dev/kill?job=%s'\n", ctl, example)
		fmt.Fprintf(tw, "  pause it (SIGSTOP)\tcurl -X POST '%s/dev/pause?job=%s'\n", ctl, example)
		fmt.Fprintf(tw, "  resume what is paused\tcurl -X POST '%s/dev/resume'\n", ctl)
		fmt.Fprintf(tw, "  make it resign\t%s resign %s --config %s\n", self, example, first.Config)
		fmt.Fprintf(tw, "  pause it everywhere\t%s pause %s --reason 'trying it' --config %s\n", self, example, first.Config)
		fmt.Fprintf(tw, "  and let it run again\t%s resume %s --config %s\n", self, example, first.Config)
	}
	if runnable != "" {
		fmt.Fprintf(tw, "  run a job once, now\t%s run %s --wait --config %s\n", self, runnable, first.Config)
	}
	fmt.Fprintf(tw, "  drain an instance\t%s drain --instance %s --config %s\n", self, first.Name, first.Config)
	fmt.Fprintf(tw, "  and undrain it\t%s undrain --instance %s --config %s\n", self, first.Name, first.Config)
	fmt.Fprintf(tw, "  restart an instance\tcurl -X POST '%s/dev/restart?instance=%s'\n", ctl, first.Name)
	var byHand []string
	for _, in := range instances {
		byHand = append(byHand, fmt.Sprintf("kill -KILL %d (%s)", in.PID, in.Name))
	}
	fmt.Fprintf(tw, "  or by hand\t%s; -STOP / -CONT to pause\n", strings.Join(byHand, ", "))
	fmt.Fprintf(tw, "  the cluster in a terminal\t%s status --watch --config %s\n", self, first.Config)
	if certs {
		fmt.Fprintf(tw, "  the certificates\t%s certs list --config %s\n", self, first.Config)
	}
	if web, ok := c.WebTier(); ok && len(web.Domains) > 0 {
		d := web.Domains[0]
		_, port, _ := net.SplitHostPort(web.Addr)
		fmt.Fprintf(tw, "  a domain over HTTPS\tcurl --cacert %s --resolve %s:%s:127.0.0.1 https://%s:%s/\n", web.RootFile, d, port, d, port)
		fmt.Fprintf(tw, "  renew its certificate\t%s certs renew %s --config %s\n", self, d, first.Config)
	}
	tw.Flush()
	p("")
	p("What happens, as %s reports it:", label)
}
