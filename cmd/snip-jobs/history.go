package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/ttysafe"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/status"
)

func historyCommand() command {
	return command{
		name:    "history",
		args:    "JOB",
		summary: "show a job's recent runs: what triggered each, where, how long, how it ended",
		about: `Shows JOB's newest runs, newest first, from PostgreSQL (job_runs, which keeps
each job's newest ` + strconv.Itoa(scheduler.KeepRuns) + ` runs): when each started, how long it took ("running"
while no end is recorded: still running, or its instance died first), what
triggered it (schedule: its interval, continuous or cron schedule, a cron slot
run on time; catch-up: a cron slot run late by the catch-up sweep; manual: an
operator's request), the instance and fencing token that ran it, the cron slot
it was for, its result and its error. Results: ok; error; panic; stale (a
newer term had written, or was recorded: the run's writes, or its start, were
refused); cancelled; cut off (its term ended while it ran: the run's own
instance says why, or the instance whose term replaced it closed it). It
only reads the database: no leadership backend (etcd or Kubernetes), no
running instance. JOB must be a job of
the config file. --json prints the same as one JSON object (job, recorded: the
runs job_runs holds for the job, runs).`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			limit := fs.Int("limit", 20, "show the newest N runs (at most "+strconv.Itoa(scheduler.KeepRuns)+", the runs kept)")
			asJSON := fs.Bool("json", false, "print JSON instead of a table")
			timeout := fs.Duration("timeout", 10*time.Second, "give up reading PostgreSQL after this long")
			return func(ctx context.Context, args []string) error {
				switch {
				case len(args) != 1:
					return usageError("usage: history takes exactly one argument, the job's name")
				case *limit < 1 || *limit > scheduler.KeepRuns:
					return usageError("--limit %d: want 1 to %d (job_runs keeps each job's newest %d runs)", *limit, scheduler.KeepRuns, scheduler.KeepRuns)
				}
				name := args[0]
				f, err := loadConfig(*path)
				if err != nil {
					writeLines(c.stderr, "", err.Error())
					return &exitError{code: 2, err: errSilent}
				}
				if !hasJob(f, name) {
					return &exitError{code: 2, err: fmt.Errorf("%s has no job called %q", f.Path, name)}
				}
				ctx, cancel := context.WithTimeout(ctx, *timeout)
				defer cancel()
				pool, err := connect.Pool(ctx, f, "history")
				if err != nil {
					return err
				}
				defer pool.Close()
				runs, recorded, err := status.Runs(ctx, pool, name, *limit)
				if err != nil {
					return err
				}
				if *asJSON {
					return ttysafe.JSON(c.stdout, runHistory{Job: name, Recorded: recorded, Runs: runs})
				}
				printHistory(c.stdout, name, runs, recorded)
				return nil
			}
		},
	}
}

// runHistory is the body of `history --json`.
type runHistory struct {
	Job string `json:"job"`
	// Recorded is how many runs of the job job_runs holds; Runs the newest
	// of them, newest first.
	Recorded int64              `json:"recorded"`
	Runs     []status.RunRecord `json:"runs"`
}

// hasJob reports whether the config has a job called name.
func hasJob(f *configs.File, name string) bool {
	for _, j := range f.Jobs {
		if j.Name == name {
			return true
		}
	}
	return false
}

// printHistory prints history's table. Every string read from the database
// is escaped (termsafe), each on one line: a run's error may hold anything,
// terminal controls and line breaks included.
func printHistory(w io.Writer, job string, runs []status.RunRecord, recorded int64) {
	if len(runs) == 0 {
		fmt.Fprintf(w, "%s has no recorded runs\n", job)
		return
	}
	esc := ttysafe.String
	fmt.Fprintf(w, "%s: the newest %d of %d recorded runs, newest first\n\n", job, len(runs), recorded)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STARTED\tDURATION\tTRIGGER\tINSTANCE\tTOKEN\tSLOT\tRESULT\tERROR")
	for _, r := range runs {
		duration, result := "running", "-"
		if !r.Finished.IsZero() {
			duration = runDuration(r.Finished.Sub(r.Started))
		}
		if r.Result != "" {
			result = esc(r.Result)
		}
		token, slot, msg := "-", "-", "-"
		if r.Token != 0 {
			token = strconv.FormatInt(r.Token, 10)
		}
		if !r.Slot.IsZero() {
			slot = r.Slot.UTC().Format(time.RFC3339)
		}
		if r.Error != "" {
			msg = esc(r.Error)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Started.UTC().Format(time.RFC3339), duration,
			esc(r.Trigger), esc(r.Instance), token, slot, result, msg)
	}
	tw.Flush()
}

// runDuration is a run's duration for people: to the millisecond under a
// second, to the tenth of a second under a minute, else to the second.
func runDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s" // the database's clock stepped back
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
