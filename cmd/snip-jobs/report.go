package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/ttysafe"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
)

func reportCommand() command {
	return command{
		name:    "report",
		args:    "show|rebuild",
		summary: "print a stored weekly report, or rebuild one week's report",
		about: `report show prints the stored weekly report of --week (an ISO week such as
2026-W47; default: the latest stored week).

report rebuild --week W builds W's report again from the counts in the database
and replaces the stored one in place: it never stores a second report and never
queues a second mail for the week (the outbox row is left as it is; a mail not
sent yet goes out with the new content). Use it after late clicks were counted,
or after a fix. The write is fenced like the job's own runs of that week:

  coordination: leader    with a fresh token from the leadership backend,
                          newer than every term so far, on the job's
                          resource (etcd: a revision; Kubernetes: the job
                          Lease's count, bumped, which ends the current term
                          at once). On etcd the leader's next fenced write is
                          refused (logged as "fenced write refused: a newer
                          term has written", its term's end names holder
                          "report rebuild by ..."): expected, it takes a new
                          term and carries on.
  coordination: database  with a claim token from the database (the sequence
                          cron_claim_tokens), on the resource of the week's slot
                          (<job>@<slot>): a claimer of that slot older than the
                          rebuild is refused, later claims are newer. No etcd.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			week := fs.String("week", "", "the ISO week, e.g. 2026-W47 (show: default the latest stored)")
			job := fs.String("job", "", "the weeklyreport job's name (default: the config's only weeklyreport job)")
			endpoints := fs.String("endpoints", "", "comma-separated etcd endpoints to use instead of the config's (rebuild, leader mode)")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 || (args[0] != "show" && args[0] != "rebuild") {
					return usageError("usage: report show|rebuild [--week 2026-W47]")
				}
				f, err := loadConfig(*path)
				if err != nil {
					writeLines(c.stderr, "", err.Error())
					return &exitError{code: 2, err: errSilent}
				}
				spec, err := jobOfType(f, "weeklyreport", *job)
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				ctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				pool, err := connect.Pool(ctx, f, "report")
				if err != nil {
					return err
				}
				defer pool.Close()
				if args[0] == "show" {
					return reportShow(ctx, c, pool, *week)
				}
				if *week == "" {
					return usageError("usage: report rebuild needs --week (e.g. --week 2026-W47)")
				}
				return reportRebuild(ctx, c, f, pool, spec, *week, *endpoints)
			}
		},
	}
}

// reportShow prints week's stored report (the latest when week is ""). The
// report holds link slugs and titles: escaped (termsafe), line breaks kept.
func reportShow(ctx context.Context, c *cli, pool *pgxpool.Pool, week string) error {
	var text strings.Builder
	err := weeklyreport.Print(ctx, pool, &text, week)
	if errors.Is(err, weeklyreport.ErrNotFound) {
		return fmt.Errorf("no stored report for %s", orLatest(week))
	}
	if err != nil {
		return err
	}
	_, err = io.WriteString(c.stdout, ttysafe.Text(text.String()))
	return err
}

// reportRebuild rebuilds week's report of the job spec, fenced like its runs.
func reportRebuild(ctx context.Context, c *cli, f *configs.File, pool *pgxpool.Pool, spec configs.Job, week, endpoints string) error {
	log := newLogger(f.Log, c.stderr)
	host, _ := os.Hostname()
	run, err := weeklyreport.RebuildRun(ctx, weeklyreport.RebuildConfig{
		Pool: pool, Job: spec, Week: week, Operator: "operator@" + host, Log: log,
		// Leader mode only: a database-mode job's deployment may run no etcd.
		LeaderToken: func(ctx context.Context) (int64, error) {
			cluster, _, closeCluster, err := connect.Cluster(f, endpoints, log)
			if err != nil {
				return 0, err
			}
			defer closeCluster()
			return cluster.FreshToken(ctx, spec.Name)
		},
	})
	if err != nil {
		return err
	}
	if err := weeklyreport.Rebuild(ctx, run, week); err != nil {
		return err
	}
	if run.Slot.IsZero() {
		fmt.Fprintf(c.stdout, "%s: report %s rebuilt (token %d, newer than every term); no second mail queued\n"+
			"The leader's next fenced write is refused once, logged as \"fenced write refused: a newer term has written\": "+
			"that is this rebuild, not a stale leader; the leader takes a new term.\n", spec.Name, week, run.Token)
	} else {
		fmt.Fprintf(c.stdout, "%s: report %s rebuilt (claim token %d, fenced with the slot %s); no second mail queued\n",
			spec.Name, week, run.Token, run.Slot.UTC().Format(time.RFC3339))
	}
	return nil
}

// jobOfType finds the config's job of type typ: the one named, or the only
// one.
func jobOfType(f *configs.File, typ, name string) (configs.Job, error) {
	var found []configs.Job
	for _, j := range f.Jobs {
		if j.Type == typ && (name == "" || j.Name == name) {
			found = append(found, j)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case name != "":
		return configs.Job{}, fmt.Errorf("%s: no %s job called %q", f.Path, typ, name)
	case len(found) == 0:
		return configs.Job{}, fmt.Errorf("%s: no job of type %s", f.Path, typ)
	default:
		return configs.Job{}, fmt.Errorf("%s: several %s jobs; name one with --job", f.Path, typ)
	}
}

func orLatest(week string) string {
	if week == "" {
		return "the latest week"
	}
	return week
}
