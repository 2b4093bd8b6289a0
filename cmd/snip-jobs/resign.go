package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/ttysafe"
	"github.com/snip/snip-jobs/leadership"
)

func resignCommand() command {
	return command{
		name:    "resign",
		args:    "JOB",
		summary: "make a job's leader hand the job over to another instance now",
		about: `Asks the instance that currently leads JOB to end its term: it stops the job
(waiting up to the job's grace period), resigns, and holds back so that another
instance wins the job; then prints the leader before and after. For the resign
hold (5 minutes) the job stays off the instance that resigned it — which takes
it back only if no other instance does — and the spread rule evens the load
with other jobs rather than move this one (to keep a server free of every
singleton for longer, drain it). Use it to move a job off a server, or to
check that failover works. The request names the leader's fencing token, so a
leader that changed in the meantime is left alone. With a single instance
running, the same instance takes the job again with a new term. Only singletons led through
terms (etcd's or Kubernetes Leases', not database-mode cron jobs) have a leader.
On Kubernetes the request is an annotation on the job's Lease (a patch).`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			endpoints := fs.String("endpoints", "", "comma-separated etcd endpoints to use instead of the config's\n(with an embedded etcd the default is http://127.0.0.1:2379)")
			timeout := fs.Duration("timeout", 60*time.Second, "give up waiting for the hand-over after this long")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usageError("usage: resign takes exactly one argument, the job's name")
				}
				name := args[0]
				f, err := loadConfig(*path)
				if err != nil {
					writeLines(c.stderr, "", err.Error())
					return &exitError{code: 2, err: errSilent}
				}
				if err := ledThroughTerms(f, name); err != nil {
					return &exitError{code: 2, err: err}
				}
				ctx, cancel := context.WithTimeout(ctx, *timeout)
				defer cancel()
				cluster, where, closeCluster, err := connect.Cluster(f, *endpoints, newLogger(f.Log, c.stderr))
				if err != nil {
					return err
				}
				defer closeCluster()
				before, after, err := leadership.Resign(ctx, cluster, name)
				if err != nil && !errors.Is(err, leadership.ErrNoLeader) && f.Leadership.Backend == configs.BackendKubernetes {
					err = fmt.Errorf("%w (%s)", err, where)
				}
				return reportResign(c.stdout, name, before, after, err)
			}
		},
	}
}

// reportResign prints the leader before and after a resign request.
func reportResign(w io.Writer, name string, before leadership.Leader, after *leadership.Leader, err error) error {
	if errors.Is(err, leadership.ErrNoLeader) {
		return fmt.Errorf("%s has no leader now: nothing to resign (is any instance running it?)", name)
	}
	if before.Instance != "" {
		fmt.Fprintf(w, "%s: leader was %s (token %d)\n", name, ttysafe.String(before.Instance), before.Token)
	}
	switch {
	case err != nil:
		return err
	case after == nil:
		fmt.Fprintf(w, "%s: handed over; no instance has taken it yet\n", name)
	case after.Instance == before.Instance:
		fmt.Fprintf(w, "%s: now %s again (token %d): no other instance took it; are the others running?\n", name, ttysafe.String(after.Instance), after.Token)
	default:
		fmt.Fprintf(w, "%s: now %s (token %d)\n", name, ttysafe.String(after.Instance), after.Token)
	}
	return nil
}

// ledThroughTerms checks that the config has a job called name that has a
// leader (a term of the leadership backend).
func ledThroughTerms(f *configs.File, name string) error {
	for _, j := range f.Jobs {
		if j.Name != name {
			continue
		}
		switch j.Mode() {
		case configs.ModeEverywhere:
			return fmt.Errorf("job %q runs on every instance (singleton: false): it has no leader", name)
		case configs.ModeDatabase:
			return fmt.Errorf("job %q uses coordination: database: each slot is decided in PostgreSQL, there is no leader", name)
		}
		return nil
	}
	return fmt.Errorf("%s has no job called %q", f.Path, name)
}
