package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/execjob/supervisor"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/scheduler"
)

// recordReclaimed names the terms of the reclaimed lease in the history,
// best-effort: the jobs have moved already, and a database that does not
// answer only leaves the successor's account (expired) standing.
func recordReclaimed(ctx context.Context, f *configs.File, lease string, log *slog.Logger) {
	ctx, pool, closeDB, err := dial(ctx, f, 5*time.Second, "reclaim")
	if err != nil {
		log.Warn("reclaim: cannot record the reclaimed terms in the history", "err", err)
		return
	}
	defer closeDB()
	n, err := scheduler.RecordReclaimed(ctx, pool, lease)
	if err != nil {
		log.Warn("reclaim: cannot record the reclaimed terms in the history", "err", err)
		return
	}
	log.Info("reclaim: recorded in the history", "terms", n, "lease", lease)
}

func reclaimCommand() command {
	return command{
		name:    "reclaim",
		summary: "end the lease of this server's snip-jobs process once it has died, so its jobs move now",
		about: `Run after this server's snip-jobs process has exited, for whatever reason:
systemd runs it as ExecStopPost= (deploy/systemd/snip-jobs.service). If the
process registered under the config's instance on this host is no longer
running (its PID and start time say so), ends its lease: on etcd it revokes
the lease, and its leader keys go with it; on Kubernetes it deletes the
instance Lease (if it still names that process), which frees the job Leases
naming it. Either way the other servers take its jobs at once instead of when
the lease expires (ttl) — once the supervisors of its exec jobs' programs on
this host are gone (they kill their programs as soon as it dies). Then it records
in the terms' history (job_terms) that the dead process's terms ended
because it was reclaimed, and closes its runs left open as cut off. A process that stopped cleanly has released its
lease already: nothing to do. It never touches the lease of a running
process, nor another host's: it then says so and exits 1. Why the process
ended is logged from systemd's $SERVICE_RESULT, $EXIT_CODE and $EXIT_STATUS
when set.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			endpoints := fs.String("endpoints", "", "comma-separated etcd endpoints to use instead of the config's")
			timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageError("usage: reclaim takes no arguments")
				}
				f, err := loadConfig(*path)
				if err != nil {
					writeLines(c.stderr, "", err.Error())
					return &exitError{code: 2, err: errSilent}
				}
				log := newLogger(f.Log, c.stderr).With("instance", f.Instance)
				why := []any{}
				for _, v := range []string{"SERVICE_RESULT", "EXIT_CODE", "EXIT_STATUS"} {
					if s := os.Getenv(v); s != "" {
						why = append(why, v, s)
					}
				}
				if f.Leadership.Backend == configs.BackendEtcd && f.Etcd.Embedded() && *endpoints == "" {
					log.Info("reclaim: nothing to do: the embedded etcd ended with the process", why...)
					return nil
				}
				cluster, _, closeCluster, err := connect.Cluster(f, *endpoints, log)
				if err != nil {
					return err
				}
				defer closeCluster()
				ctx, cancel := context.WithTimeout(ctx, *timeout)
				defer cancel()
				// Its exec programs' supervisors kill their trees as soon as it
				// died; its jobs move once they are gone.
				got, err := leadership.Reclaim(ctx, cluster, f.Instance, "", func(ctx context.Context, reg leadership.Registration) error {
					return supervisor.WaitGone(ctx, f.Instance, reg.PID)
				})
				reg := got.Registration
				switch {
				case errors.Is(err, leadership.ErrStillRunning), errors.Is(err, leadership.ErrOtherHost), errors.Is(err, leadership.ErrOtherPIDNamespace):
					log.Warn("reclaim: lease left alone", append(why, "pid", reg.PID, "host", reg.Host, "lease", reg.Lease, "reason", err.Error())...)
					return fmt.Errorf("lease left alone: %w", err)
				case err != nil:
					log.Error("reclaim failed: the dead process's jobs move when its lease expires", append(why, "err", err.Error())...)
					return err
				case !got.Found:
					log.Info("reclaim: nothing to do: no registration left (the process revoked its lease, or it expired)", why...)
				default:
					log.Info("reclaim: the process is gone; revoked its lease, its jobs move now",
						append(why, "pid", reg.PID, "lease", reg.Lease, "since", reg.Started)...)
					recordReclaimed(ctx, f, reg.Lease, log)
				}
				return nil
			}
		},
	}
}
