package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/app/clusterview"
	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/ttysafe"
	"github.com/snip/snip-jobs/scheduler/status"
)

func statusCommand() command {
	return command{
		name:    "status",
		summary: "show every job's leader, term and last run, as the cluster sees them",
		about: `Shows the jobs of the config file as the whole cluster sees them, read from the
leadership backend (the leader of each singleton: instance, fencing token, since
when, time left on its etcd lease or, on Kubernetes, when its instance Lease was
last renewed) and PostgreSQL (each job's last run: where, when, result; a cron
job's last slot and its state), and which instances are up; below the table,
the operators' controls in force: paused jobs (LEADER "paused") and drained
instances, with who, how long ago and why, and open manual runs. It needs no running
instance and can be run on any machine that reaches the backend and the
database. --json prints the same as one JSON object. If the backend or the
database cannot be read, what could be read is shown, the problems are printed
on standard error, and the exit status is 1.

--watch redraws the table every --interval (1s) until Ctrl-C, for a terminal
on call: the problems of the last read are shown under it, and Ctrl-C exits 0.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			asJSON := fs.Bool("json", false, "print JSON instead of a table")
			endpoints := fs.String("endpoints", "", "comma-separated etcd endpoints to use instead of the config's\n(with an embedded etcd the default is http://127.0.0.1:2379)")
			timeout := fs.Duration("timeout", 10*time.Second, "give up reading etcd and PostgreSQL after this long (each read, with --watch)")
			watch := fs.Bool("watch", false, "redraw the table every --interval until Ctrl-C")
			interval := fs.Duration("interval", time.Second, "how often --watch redraws")
			return func(ctx context.Context, args []string) error {
				switch {
				case len(args) > 0:
					return usageError("usage: status takes no arguments")
				case *watch && *asJSON:
					return usageError("--watch redraws the table: it does not go with --json")
				case *interval <= 0:
					return usageError("--interval %v: want a positive duration", *interval)
				}
				f, err := loadConfig(*path)
				if err != nil {
					writeLines(c.stderr, "", err.Error())
					return &exitError{code: 2, err: errSilent}
				}
				log := newLogger(f.Log, c.stderr)
				if *watch {
					src := openStatusSource(f, *endpoints, log)
					defer src.close()
					watchStatus(ctx, c.stdout, src, *interval, *timeout)
					return nil
				}
				ctx, cancel := context.WithTimeout(ctx, *timeout)
				defer cancel()
				st := readStatus(ctx, f, *endpoints, log)
				if *asJSON {
					if err := ttysafe.JSON(c.stdout, st); err != nil {
						return err
					}
				} else {
					printStatus(c.stdout, st, time.Now())
				}
				if len(st.Errors) > 0 {
					for _, e := range st.Errors {
						fmt.Fprintf(c.stderr, "snip-jobs status: %s\n", ttysafe.String(e))
					}
					return errSilent
				}
				return nil
			}
		},
	}
}

func readStatus(ctx context.Context, f *configs.File, endpoints string, log *slog.Logger) status.Cluster {
	src := openStatusSource(f, endpoints, log)
	defer src.close()
	return src.read(ctx)
}

// statusSource is what status reads from: the leadership backend's client
// (etcd's or the Kubernetes API server's) and PostgreSQL's, opened once (and
// kept across the redraws of --watch). None connects until read.
type statusSource struct {
	f        *configs.File
	cli      *clientv3.Client
	view     status.LeadershipReader
	pool     *pgxpool.Pool
	openErrs []string // why a client could not be made, shown at every read
}

func openStatusSource(f *configs.File, endpoints string, log *slog.Logger) *statusSource {
	src := &statusSource{f: f}
	switch {
	case f.Leadership.Backend == configs.BackendKubernetes && connect.NeedsTerms(f):
		cli, ns, _, err := connect.Kube(f)
		if err != nil {
			src.openErrs = append(src.openErrs, err.Error())
		} else {
			src.view = clusterview.Kube(cli, ns, f.Kubernetes.Prefix, time.Now)
		}
	case connect.NeedsEtcd(f) || endpoints != "":
		cli, err := connect.Etcd(f, connect.Endpoints(f, endpoints), log)
		if err != nil {
			src.openErrs = append(src.openErrs, err.Error())
		} else {
			src.cli, src.view = cli, clusterview.Etcd(cli, f.Etcd.Prefix)
		}
	}
	pool, err := connect.Pool(context.Background(), f, "status")
	if err != nil {
		src.openErrs = append(src.openErrs, fmt.Errorf("%w: last runs and slots are not shown", err).Error())
	}
	src.pool = pool
	return src
}

func (src *statusSource) close() {
	if src.cli != nil {
		_ = src.cli.Close()
	}
	if src.pool != nil {
		src.pool.Close()
	}
}

// read reads the cluster once; what cannot be read is listed in Errors.
func (src *statusSource) read(ctx context.Context) status.Cluster {
	st := status.Read(ctx, status.Source{Leadership: src.view, Pool: src.pool, Jobs: src.f.Jobs})
	st.Errors = append(slices.Clone(src.openErrs), st.Errors...)
	return st
}

// printStatus prints status's table. Every string read from etcd or the
// database is escaped (termsafe): an error text, even an instance's host name
// in etcd, may hold terminal controls.
func printStatus(w io.Writer, st status.Cluster, now time.Time) {
	esc := ttysafe.String
	printInstances(w, st.Instances, now)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tMODE\tLEADER\tTOKEN\tSINCE\tLEASE LEFT\tLAST RUN\tRESULT\tLAST SLOT\tSLOT STATE")
	var failures []string
	for _, j := range st.Jobs {
		leader, token, since, left := "-", "-", "-", "-"
		switch {
		case j.Leader != nil:
			leader, token = esc(j.Leader.Instance), strconv.FormatInt(j.Leader.Token, 10)
			since = ago(now, j.Leader.Since) + " ago"
			left = (time.Duration(j.Leader.LeaseTTLSeconds) * time.Second).String()
			if j.Leader.Holder != "" {
				left = "renewed " + ago(now, j.Leader.Renewed) + " ago"
			}
		case j.Mode == "leader":
			leader = "none"
		}
		if j.Paused != nil {
			leader = "paused"
		}
		lastRun, result := "-", "-"
		if r := j.LastRun; r != nil {
			lastRun = fmt.Sprintf("%s, %s ago", esc(r.Instance), ago(now, r.Started))
			result = esc(r.Result)
			switch {
			case result == "" && r.PID != 0:
				result = fmt.Sprintf("running (pid %d)", r.PID)
			case result == "":
				result = "running"
			}
			if r.Error != "" {
				failures = append(failures, fmt.Sprintf("%s: last run on %s (token %d): %s: %s", j.Name, esc(r.Instance), r.Token, esc(r.Result), esc(r.Error)))
			}
		}
		slot, slotState := "-", "-"
		if s := j.LastSlot; s != nil {
			slot, slotState = s.Slot.Format(time.RFC3339), esc(s.State)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.Mode, leader, token, since, left, lastRun, result, slot, slotState)
	}
	tw.Flush()
	if controls := controlLines(st, now); len(controls) > 0 {
		fmt.Fprintln(w)
		for _, l := range controls {
			fmt.Fprintln(w, l)
		}
	}
	if len(failures) > 0 {
		fmt.Fprintln(w)
		for _, f := range failures {
			fmt.Fprintln(w, f)
		}
	}
}

// controlLines are the operators' controls in force: paused jobs, drained
// instances and open manual runs, each with who, how long ago and why.
func controlLines(st status.Cluster, now time.Time) []string {
	esc := ttysafe.String
	var out []string
	for _, j := range st.Jobs {
		if p := j.Paused; p != nil {
			out = append(out, fmt.Sprintf("paused: %s, by %s %s ago%s", j.Name, esc(p.By), ago(now, p.Since), quoted(p.Reason)))
		}
	}
	for _, d := range st.Drained {
		out = append(out, fmt.Sprintf("drained: %s, by %s %s ago%s", esc(d.Instance), esc(d.By), ago(now, d.Since), quoted(d.Reason)))
	}
	for _, j := range st.Jobs {
		if m := j.ManualRun; m != nil {
			where := m.State
			if m.Instance != "" {
				where += " on " + esc(m.Instance)
			}
			out = append(out, fmt.Sprintf("manual run %d of %s: %s, asked for by %s %s ago", m.ID, j.Name, where, esc(m.RequestedBy), ago(now, m.RequestedAt)))
		}
	}
	return out
}

// printInstances prints the instances line(s) of status's table; on
// Kubernetes, held instance Leases not renewed lately apart.
func printInstances(w io.Writer, instances []status.Instance, now time.Time) {
	if len(instances) == 0 {
		return
	}
	esc := ttysafe.String
	var up, stale []string
	for _, r := range instances {
		lease := fmt.Sprintf("lease %gs left of %gs", r.LeaseTTLSeconds, r.LeaseGrantedSeconds)
		if r.Holder != "" {
			lease = fmt.Sprintf("renewed %s ago, of %gs", ago(now, r.Renewed), r.LeaseGrantedSeconds)
		}
		line := fmt.Sprintf("%s (host %s, pid %d, up %s, %s)", esc(r.Name), esc(r.Host), r.PID, ago(now, r.Started), lease)
		if r.Drained != nil {
			line = fmt.Sprintf("%s (drained; host %s, pid %d, up %s, %s)", esc(r.Name), esc(r.Host), r.PID, ago(now, r.Started), lease)
		}
		if r.Up {
			up = append(up, line)
		} else {
			stale = append(stale, line)
		}
	}
	if len(up) > 0 {
		fmt.Fprintf(w, "instances up: %s\n", strings.Join(up, ", "))
	}
	if len(stale) > 0 {
		fmt.Fprintf(w, "instances not up (leaving, or instance Lease not renewed within its duration: gone, or clocks apart): %s\n", strings.Join(stale, ", "))
	}
	fmt.Fprintln(w)
}

// ago is a rough age for people: wall clocks of different hosts are compared.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}
