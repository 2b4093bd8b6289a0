package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/internal/ttysafe"
	"github.com/snip/snip-jobs/scheduler/controls"
)

// runNowOptions are the flags of run JOB.
type runNowOptions struct {
	wait    *bool
	timeout *time.Duration
	by      *string
}

func runNowFlags(fs *flag.FlagSet) runNowOptions {
	return runNowOptions{
		wait:    fs.Bool("wait", false, "run JOB: wait until the run is over and print its result (exit status 1 if it failed or timed out)"),
		timeout: fs.Duration("timeout", time.Minute, "run JOB: give up (with --wait: waiting for the result) after this long"),
		by:      fs.String("by", "", fmt.Sprintf("run JOB: who asks, as recorded (default: the OS user and host, user@host; at most %d characters)", controls.MaxBy)),
	}
}

// runNow is `run JOB`: one manual run of the job, joined to the open one if
// there is one, followed to its end with --wait.
func runNow(ctx context.Context, c *cli, path, name string, o runNowOptions) error {
	if err := checkText(*o.by, ""); err != nil {
		return err
	}
	f, spec, err := loadJob(c, path, name)
	if err != nil {
		return err
	}
	ctx, pool, hangUp, err := dial(ctx, f, *o.timeout, "run-now")
	if err != nil {
		return err
	}
	defer hangUp()
	m, joined, err := controls.RequestRun(ctx, pool, spec, operator(*o.by))
	var paused *controls.PausedError
	switch {
	case errors.Is(err, controls.ErrContinuous), errors.As(err, &paused):
		return &exitError{code: 1, err: err}
	case err != nil:
		return err
	}
	if joined {
		fmt.Fprintf(c.stdout, "%s: joined manual run %d, asked for by %s at %s (%s): one run for both\n", name, m.ID,
			ttysafe.String(m.RequestedBy), m.RequestedAt.UTC().Format(time.RFC3339), describeOpen(m))
	} else {
		fmt.Fprintf(c.stdout, "%s: manual run %d asked for by %s (%s)\n", name, m.ID, ttysafe.String(m.RequestedBy), describeOpen(m))
	}
	if !*o.wait {
		return nil
	}
	m, err = controls.Await(ctx, pool.Config().ConnConfig, pool, m.ID)
	if err != nil && !m.Closed() {
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(c.stdout, "%s: manual run %d not over after %v (%s)\n", name, m.ID, *o.timeout, describeOpen(m))
			printReports(c.stdout, m)
			return errSilent
		}
		return err
	}
	m = awaitRunRecord(ctx, pool, m)
	printOutcome(c.stdout, name, m)
	if m.State != controls.StateDone {
		return errSilent
	}
	return nil
}

// awaitRunRecord waits, a moment at most, until the ends of a closed
// request's executions are recorded in job_runs (each instance writes them
// just after the request closes), so that the duration printed is the one
// `history` shows. Past the moment, or on an error, it returns m as it is.
func awaitRunRecord(ctx context.Context, pool controls.Querier, m controls.ManualRun) controls.ManualRun {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for !m.Recorded() && sleep.For(ctx, 20*time.Millisecond) {
		next, err := controls.ReadRun(ctx, pool, m.ID)
		if err != nil {
			return m
		}
		m = next
	}
	return m
}

// describeOpen says where an open request stands.
func describeOpen(m controls.ManualRun) string {
	switch {
	case m.Closed():
		return m.State
	case m.State == controls.StateRunning && m.Instance != "":
		return fmt.Sprintf("running on %s, token %d", ttysafe.String(m.Instance), m.Token)
	case m.Mode == "everywhere":
		return fmt.Sprintf("%s; %d of %d instance(s) have run it", m.State, len(finished(m.Reports)), len(m.Expected))
	}
	return m.State
}

func finished(rs []controls.Report) []controls.Report {
	var out []controls.Report
	for _, r := range rs {
		if !r.Finished.IsZero() {
			out = append(out, r)
		}
	}
	return out
}

// printOutcome prints a request that is over: where it ran, with which
// token, how long, and how it ended (its error escaped); each instance's for
// a job that runs everywhere.
func printOutcome(w io.Writer, name string, m controls.ManualRun) {
	if m.Mode == "everywhere" {
		fmt.Fprintf(w, "%s: manual run %d %s on %d instance(s)\n", name, m.ID, m.State, len(finished(m.Reports)))
		printReports(w, m)
		return
	}
	line := fmt.Sprintf("%s: manual run %d %s on %s (token %d) in %s: %s", name, m.ID, m.State,
		ttysafe.String(m.Instance), m.Token, runDuration(m.Finished.Sub(m.Started)), ttysafe.String(m.Result))
	if m.Error != "" {
		line += ": " + ttysafe.String(m.Error)
	}
	if m.Attempts > 1 {
		line += fmt.Sprintf(" (claimed %d times: an earlier claimer stopped before it was over)", m.Attempts)
	}
	fmt.Fprintln(w, line)
}

// printReports prints each instance's run of a request of a job that runs
// everywhere, and the expected instances that have not reported.
func printReports(w io.Writer, m controls.ManualRun) {
	seen := map[string]bool{}
	for _, r := range m.Reports {
		seen[r.Instance] = true
		switch {
		case r.Finished.IsZero():
			fmt.Fprintf(w, "  %s: running since %s\n", ttysafe.String(r.Instance), r.Started.UTC().Format(time.RFC3339))
		case r.Error != "":
			fmt.Fprintf(w, "  %s: %s in %s: %s\n", ttysafe.String(r.Instance), ttysafe.String(r.Result), runDuration(r.Finished.Sub(r.Started)), ttysafe.String(r.Error))
		default:
			fmt.Fprintf(w, "  %s: %s in %s\n", ttysafe.String(r.Instance), ttysafe.String(r.Result), runDuration(r.Finished.Sub(r.Started)))
		}
	}
	for _, e := range m.Expected {
		if !seen[e] {
			fmt.Fprintf(w, "  %s: not run (yet)\n", ttysafe.String(e))
		}
	}
}
