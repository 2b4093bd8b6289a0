package main

import (
	"context"
	"flag"
	"log/slog"

	legolog "github.com/go-acme/lego/v5/log"

	"github.com/snip/snip-jobs/app/etcdlocal"
	"github.com/snip/snip-jobs/app/service"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/execjob"
)

func runCommand() command {
	return command{
		name:    "run",
		args:    "[JOB]",
		summary: "run the service: the config's jobs, until SIGTERM; or, given a JOB, run it once now",
		about:   runAbout,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			listen := fs.String("embedded-etcd-listen", etcdlocal.DefaultClientAddr,
				"client address of the embedded etcd, used only when the config has no etcd endpoints\n(a loopback host:port; port 0 picks a free port, logged at start)")
			allowReadable := fs.Bool("allow-readable-secrets", false,
				"start even when a secret file (postgres.url_file, etcd.auth.password_file, etcd.tls.key, a job's\nkey_file...) is readable by its group or others; each is then logged as a warning\n(one others can write is refused whatever this says)")
			devControl := fs.String("dev-control", "",
				"base URL of the snip-dev supervisor (set by dev for its instances): the status page\nthen shows buttons that ask it to kill, pause, restart an instance or resign a job")
			undrain := fs.Bool("undrain", false, "lift this instance's drain (snip-jobs drain) at start, before its jobs run")
			now := runNowFlags(fs)
			return func(ctx context.Context, args []string) error {
				set := map[string]bool{}
				fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
				switch {
				case len(args) == 1:
					for _, service := range []string{"embedded-etcd-listen", "allow-readable-secrets", "dev-control", "undrain"} {
						if set[service] {
							return usageError("usage: --%s is for the service (run without a JOB)", service)
						}
					}
					return runNow(ctx, c, *path, args[0], now)
				case len(args) > 1:
					return usageError("usage: run takes at most one argument, a job's name (none: run the service)")
				}
				for _, manual := range []string{"wait", "timeout", "by"} {
					if set[manual] {
						return usageError("usage: --%s is for run JOB (a manual run), not for the service", manual)
					}
				}
				return runService(ctx, c, *path, service.Options{
					EmbeddedListen: *listen, DevControl: *devControl, AllowReadableSecrets: *allowReadable, Undrain: *undrain,
				})
			}
		},
	}
}

// runAbout is run's help beyond its summary.
var runAbout = `With a JOB: asks for one extra execution of JOB now, exactly once across the
cluster, and returns (with --wait: once it is over, printing where it ran, with
which token, how long, and its result; exit status 1 if it failed or
--timeout passed). See "run JOB" below.

Without: runs the jobs of the config file until SIGINT or SIGTERM. A job that is not a
singleton runs here whatever the other instances do; a singleton runs only while
this instance holds the job's term (in etcd, or on a Kubernetes Lease with
leadership.backend: kubernetes), and its PostgreSQL writes are fenced by the
term's token. With no etcd endpoints in the config, run starts an
embedded single-member etcd (in etcd.embedded_dir), which is for one instance or
development only. With leadership.backend: kubernetes the terms are kept on
Kubernetes Leases instead (the kubernetes section; no etcd is started or
dialled). The database URL is read from postgres.url_env or
postgres.url_file and must be set; an unreachable database is logged and
retried, not fatal.

Unless postgres.migrate_on_start is true (then run applies the migrations
first), run compares the database's schema with the migrations built into this
binary: migrations it lacks make run refuse to start, naming them (apply them
with 'snip-jobs migrate'); migrations a newer binary applied are only warned
about, for rolling upgrades. When PostgreSQL does not answer at start, run
starts anyway and compares as soon as it answers; lacking migrations then stop
it (exit status 1).

Start-up fails (exit status 1) when another live process already uses this
instance name, when the schema lacks migrations, when etcd answers but refuses
this instance (a wrong CA, a client certificate it does not accept or that
expired, a wrong password: at once, one error naming the endpoint and the
cause), when no lease can be had within max(30s, 3 × ttl) (etcd's lease, or
the instance's Kubernetes Lease), or when a
secret file the config names (postgres.url_file, etcd.auth.password_file,
etcd.tls.key, kubernetes.token_file, kubernetes.kubeconfig, a job's key_file)
is not a regular file, is larger than a secret (64 KiB), or is writable by
its group or others (never allowed), or is readable by them: chmod go-rwx it,
or pass --allow-readable-secrets to start with a warning for each readable
one instead; or when another file it names (etcd.tls.ca and cert,
kubernetes.ca_file, a job's ca_roots_file) is not a regular file or holds
more than 1 MiB. Each is named at its setting's file:line:col. Files under
$CREDENTIALS_DIRECTORY (systemd's LoadCredential) are not checked for
readers. The process is non-dumpable: no process of its user (a reload
command, an exec program) can read its environment or memory.

/metrics, /healthz, /readyz, /status (JSON) and the cluster's status page
(/status/, with a timeline of the terms) are served on http.listen, and the
job types' listeners (certrenew's HTTP-01 challenges) on theirs, from the
start, before anything waits on PostgreSQL or etcd. While etcd does not
answer it waits the same way with or without a login (etcd.auth): /healthz
answers, /readyz says the session holds no lease (and, until PostgreSQL has
answered, that the schema is not yet compared). Under systemd (Type=notify)
it reports READY=1 once the jobs run, pings the watchdog while the leadership
session and the scheduler are healthy, and reports STOPPING=1 at shutdown.

Sockets passed by systemd's socket activation (LISTEN_FDS) are used by their
FileDescriptorName: "admin" instead of http.listen, "challenge" instead of the
certrenew job's challenge_listen (port 80, which the sandboxed unit cannot bind
itself; see deploy/systemd). A socket under another name is an error.

On SIGTERM or SIGINT it stops taking work, cancels the jobs, waits for each up to
its grace period, resigns every term and releases its lease (etcd: revokes it;
Kubernetes: deletes its instance Lease), so that other instances take over at
once, without waiting for the lease to expire; then it
exits 0. All of that is bounded by shutdown_timeout (exit status 1 if a job did
not stop in time). A second signal exits at once. A signal during start-up
stops it; a start-up still running shutdown_timeout after the signal ends
the process (exit status 1).

No job runs before the operators' controls (snip-jobs pause, drain) have been
read from PostgreSQL once: a job paused stays paused across restarts. A
drained instance leads no singleton; --undrain lifts this instance's drain at
start (the step after a planned reboot).

run JOB: the request is a row of manual_runs (who: --by, else user@host). While
one request of the job is pending or running, another 'run JOB' joins it
rather than asking for a second execution, and says so. A singleton's request
is run by its leader, under its term and fenced by its token (database mode:
by the instance whose claim wins, with a claim token); if that instance dies
or the job is paused in the middle, the next leader (or claimer) runs it again
and the old one's late writes are refused by the fence, so one execution
completes (a job that completes the request in its own transaction — the sql
type does — commits its effects once). A job that runs everywhere runs it once
on every instance; --wait waits for every instance up when it was asked (as
the database sees them: their controls connection), or the timeout. A
continuous job is refused (it always runs), as is a paused one. The run is in
'snip-jobs history JOB' with trigger manual; it does not move the job's
interval schedule. The instances learn of it at once (a PostgreSQL
notification) or within a renew interval.

Programs as jobs (type: exec), the program's contract:

` + execjob.Contract

// runService runs the config's jobs until ctx ends: the command without a JOB.
// o's Config, Types, Version, Log and Sockets are filled in here.
func runService(ctx context.Context, c *cli, path string, o service.Options) error {
	// First: no process of this user may read the secrets in this one's
	// environment or memory from now on.
	if err := service.Undumpable(); err != nil {
		return err
	}
	// Then taking the sockets clears the activation variables from the
	// environment, before anything else reads it.
	socks, err := service.InheritSockets(registry())
	if err != nil {
		return err
	}
	f, err := loadConfig(path)
	if err != nil {
		writeLines(c.stderr, "", err.Error())
		return &exitError{code: 2, err: errSilent}
	}
	log := newLogger(f.Log, c.stderr)
	// lego logs through a process-wide logger (to stdout at Info by
	// default): route it to ours, warnings and up.
	legolog.SetDefault(newLogger(configs.Log{Format: f.Log.Format, Level: max(f.Log.Level, slog.LevelWarn)}, c.stderr).
		With("instance", f.Instance, "component", "lego"))
	o.Config, o.Types, o.Version, o.Log, o.Sockets = f, registry(), versionString(), log, socks
	if err := service.Run(ctx, o); err != nil {
		log.With("instance", f.Instance).Error("exiting", "err", err)
		return err
	}
	return nil
}
