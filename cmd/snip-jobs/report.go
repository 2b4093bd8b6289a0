package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/scheduler"
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
sent yet goes out with the new content). The write is fenced with a fresh token
from etcd, newer than every term so far: a leader of the job that writes after
it is refused and takes a new term, so the rebuild cannot be overwritten by a
stale leader. Use it after late clicks were counted, or after a fix.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			week := fs.String("week", "", "the ISO week, e.g. 2026-W47 (show: default the latest stored)")
			job := fs.String("job", "", "the weeklyreport job's name (default: the config's only weeklyreport job)")
			endpoints := fs.String("endpoints", "", "comma-separated etcd endpoints to use instead of the config's (rebuild)")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 || (args[0] != "show" && args[0] != "rebuild") {
					return usageError("usage: report show|rebuild [--week 2026-W47]")
				}
				f, err := loadConfig(*path)
				if err != nil {
					writeLines(c.stderr, "", err.Error())
					return &exitError{code: 2, err: errSilent}
				}
				spec, err := reportJob(f, *job)
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				ctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				pool, err := openPool(ctx, f, "report")
				if err != nil {
					return err
				}
				defer pool.Close()
				if args[0] == "show" {
					err := weeklyreport.Print(ctx, pool, c.stdout, *week)
					if errors.Is(err, weeklyreport.ErrNotFound) {
						return fmt.Errorf("no stored report for %s", orLatest(*week))
					}
					return err
				}
				if *week == "" {
					return usageError("usage: report rebuild needs --week (e.g. --week 2026-W47)")
				}
				cli, err := newEtcdClient(f, etcdEndpoints(f, *endpoints), newLogger(f.Log, c.stderr))
				if err != nil {
					return err
				}
				defer cli.Close()
				token, err := leadership.FreshToken(ctx, cli, f.Etcd.Prefix)
				if err != nil {
					return err
				}
				host, _ := os.Hostname()
				operator := "operator@" + host
				run := scheduler.NewRun(scheduler.RunConfig{Job: spec.Name, Instance: operator, Token: token,
					Fence: fencing.New(pool, operator), Log: newLogger(f.Log, c.stderr)})
				if err := weeklyreport.Rebuild(ctx, run, *week); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "%s: report %s rebuilt (token %d); no second mail queued\n", spec.Name, *week, token)
				return nil
			}
		},
	}
}

// reportJob finds the weeklyreport job: the one named, or the only one.
func reportJob(f *configs.File, name string) (configs.Job, error) {
	var found []configs.Job
	for _, j := range f.Jobs {
		if j.Type == "weeklyreport" && (name == "" || j.Name == name) {
			found = append(found, j)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case name != "":
		return configs.Job{}, fmt.Errorf("%s: no weeklyreport job called %q", f.Path, name)
	case len(found) == 0:
		return configs.Job{}, fmt.Errorf("%s: no job of type weeklyreport", f.Path)
	default:
		return configs.Job{}, fmt.Errorf("%s: several weeklyreport jobs; name one with --job", f.Path)
	}
}

func orLatest(week string) string {
	if week == "" {
		return "the latest week"
	}
	return week
}
