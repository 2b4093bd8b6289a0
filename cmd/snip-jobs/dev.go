package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/snip/snip-jobs/internal/devcluster"
)

func devCommand() command {
	return command{
		name:    "dev",
		summary: "run a whole local cluster (PostgreSQL, etcd, three instances, demo data) to watch it fail over",
		about: `Runs a local Snip jobs cluster, for trying things out and for development:
a throwaway PostgreSQL from the machine's server binaries (Debian's
postgresql-15), migrated and filled with demo data (links, two weeks of click
counts, custom domains, a stream of clicks on one viral link), an embedded
etcd, and three instances of this binary as child processes, each running the
demo jobs. It prints where each instance's status page is and how to break
things: kill or pause (SIGSTOP) the leader of a job, make it resign, restart an
instance — as commands to paste, and as buttons on the pages. Then it narrates
every change of leader until Ctrl-C, which stops the instances (SIGTERM, then
SIGKILL after 10s) and removes everything it created. A second Ctrl-C kills the
instances at once.

Nothing is installed and nothing outside the temporary directory is written.
It needs no config file and reads none. Everything listens on 127.0.0.1 only:
it is for a developer's machine, never a server.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			base := fs.Int("http-base", devcluster.DefaultHTTPBase,
				"the supervisor listens on 127.0.0.1:PORT, the instances on PORT+1, PORT+2, ...\n(a port in use is replaced by a free one); -1 picks free ports for all")
			instances := fs.Int("instances", devcluster.DefaultInstances, "how many instances to run")
			ttl := fs.Duration("ttl", devcluster.DefaultTTL, "the instances' lease TTL: how long a killed leader's jobs wait for a successor")
			bindir := fs.String("pg-bindir", "", "folder of PostgreSQL's initdb and postgres\n(default: pg_config --bindir, else /usr/lib/postgresql/15/bin)")
			logs := fs.Bool("logs", false, "also print the instances' logs here, each line prefixed with its instance\n(they are always written to files in the cluster's folder)")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usageError("usage: dev takes no arguments")
				}
				if *instances < 1 || *instances > 9 {
					return usageError("usage: --instances must be from 1 to 9")
				}
				if *base == 0 || *base > 65535-*instances {
					return usageError("usage: --http-base must be a port (or -1 for free ports)")
				}
				if *ttl < 2*time.Second || *ttl%time.Second != 0 {
					return usageError("usage: --ttl must be whole seconds, at least 2s (etcd's lease granularity)")
				}
				return runDev(ctx, c, devcluster.Config{
					HTTPBase: *base, Instances: *instances, TTL: *ttl, PGBindir: *bindir,
				}, *logs)
			}
		},
	}
}

// runDev starts the cluster, prints the banner, narrates until ctx ends (the
// first Ctrl-C), then stops and removes everything.
func runDev(ctx context.Context, c *cli, cfg devcluster.Config, logs bool) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this binary to run the instances: %w", err)
	}
	cfg.Executable = exe
	cfg.Types = registry()
	cfg.Out = c.stdout
	cfg.Log = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if logs {
		cfg.ChildOutput = c.stderr
	}

	// After the first signal, a second one kills the instances at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	fmt.Fprintln(c.stdout, "snip-jobs dev: starting a local cluster (Ctrl-C stops it and removes everything)")
	cluster, err := devcluster.Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(c.stdout, "stopped during start-up; everything it created is removed")
			return nil
		}
		return err
	}
	printBanner(c.stdout, cluster, commandLine(exe))
	cluster.Narrate()

	// Each signal reaches both ctx (main's) and sigs: count them on sigs,
	// so that the one that ended ctx is not taken for a second one.
	seen := 0
	select {
	case <-sigs:
		seen++
	case <-ctx.Done():
	}
	fmt.Fprintf(c.stdout, "\nstopping: SIGTERM to the instances (SIGKILL after %v; Ctrl-C again to kill them now)\n", devcluster.StopBound)
	dir, pgdir := cluster.Dir(), cluster.PostgresDir()
	closed := make(chan error, 1)
	go func() { closed <- cluster.Close(context.Background()) }()
	for {
		select {
		case err := <-closed:
			if err != nil {
				fmt.Fprintf(c.stdout, "stopped, with problems: %v\n", err)
			}
			fmt.Fprintf(c.stdout, "stopped; removed %s and %s\n", dir, pgdir)
			return nil
		case <-sigs:
			if seen++; seen >= 2 {
				fmt.Fprintln(c.stdout, "killing the instances now")
				cluster.KillAll()
			}
		}
	}
}

// commandLine is how to run this binary again from the shell the developer
// typed into: `go run ./cmd/snip-jobs` when it was built by go run.
func commandLine(exe string) string {
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/snip-jobs"
	}
	return exe
}

func printBanner(w io.Writer, c *devcluster.Cluster, self string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	jobs := c.Jobs()
	var names []string
	example, certs := "", false
	for _, j := range jobs {
		certs = certs || j.Type == "certrenew"
		kind := "singleton"
		if !j.Singleton {
			kind = "everywhere"
		} else if example == "" {
			example = j.Name
		}
		names = append(names, fmt.Sprintf("%s (%s, %s)", j.Name, j.Type, kind))
	}
	instances := c.Instances()
	first := instances[0]

	p("")
	p("snip-jobs dev: a local Snip jobs cluster, up in %v. Ctrl-C stops it and removes everything.", c.Started().Round(100*time.Millisecond))
	p("")
	row := func(label, format string, args ...any) { p("  %-12s%s", label, fmt.Sprintf(format, args...)) }
	row("PostgreSQL", "%s  (%s; data in %s)", c.DatabaseURL(), c.PostgresBindir(), c.PostgresDir())
	row("etcd", "%s  (embedded; key prefix %s)", c.EtcdEndpoint(), c.Prefix())
	row("files", "%s  (configs, logs, etcd's data)", c.Dir())
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
	}
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
	p("What happens, as etcd reports it:")
}
