package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/app/service"
	"github.com/snip/snip-jobs/configs"
)

func validateCommand() command {
	return command{
		name:    "validate",
		summary: "check a config file and report every problem with its file:line",
		about: `Reads the config file and checks all of it: unknown or duplicate keys, unknown job
types, job options, bad durations and cron specs, leadership timing, and more.
Every problem is printed on standard error as file:line:col: message, and the
exit status is 2; a valid file exits 0. Nothing is contacted: validate needs
neither etcd nor PostgreSQL, so it can run wherever the file is written. A
kubernetes.kubeconfig is read when it can be (its credentials are not): a
context that is not in it, or whose cluster is reached over plain HTTP or
with insecure-skip-tls-verify, is a problem, as run refuses it. With
--print it shows the effective configuration, every default filled in (secrets
are never in it: only where they are read from).

It also examines every file the config names that exists where it runs
(secrets, CA bundles and certificates, a kubeconfig and the files it names, a
job's key_file and ca_roots_file), as run will at start, and says what run
will say, at the file:line:col of the setting and with the job's name: a file
that is not a regular file (a named pipe, a device), larger than it may be
(a secret 64 KiB, a certificate file 1 MiB, a kubeconfig 1 MiB), or a secret
writable by its group or others, or readable by them, is reported on
standard error with the reason and the fix, and the exit status is 2. With
--allow-readable-secrets, as with run's, a secret others can only read is a
warning instead (exit status 0); the others stay errors. A file that does not
exist here is not reported: run reports it when it reads it.

Job types built into this binary: ` + strings.Join(registry().Names(), ", ") + `.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			print := fs.Bool("print", false, "print the effective configuration (defaults filled in)")
			allowReadable := fs.Bool("allow-readable-secrets", false,
				"report secret files readable by their group or others as warnings, as run --allow-readable-secrets\nstarts with them (files others can write stay errors)")
			return func(_ context.Context, args []string) error {
				if len(args) > 0 {
					return usageError("usage: validate takes no arguments (the file is given by --config)")
				}
				f, err := loadConfig(*path)
				if err != nil {
					writeLines(c.stderr, "", err.Error())
					return &exitError{code: 2, err: errSilent}
				}
				if f.Leadership.Backend == configs.BackendKubernetes {
					problem, unread := connect.CheckKubeconfig(f.Kubernetes)
					switch {
					case problem != nil:
						fmt.Fprintf(c.stderr, "%s: %s\n", f.SettingPos("kubernetes.kubeconfig"), problem)
						return &exitError{code: 2, err: errSilent}
					case unread != nil:
						fmt.Fprintf(c.stderr, "%s: warning: kubernetes.kubeconfig cannot be read here, so its context's server and TLS settings "+
							"were not checked (run checks them): %v\n", f.Path, unread)
					}
				}
				warnings, err := service.CheckFiles(f, *allowReadable)
				for _, p := range warnings {
					fmt.Fprintf(c.stderr, "%s: warning: %s: %s\n", p.Pos, service.ReadableSecretWarning, p)
				}
				if err != nil {
					writeLines(c.stderr, "", err.Error())
					return &exitError{code: 2, err: errSilent}
				}
				if *print {
					fmt.Fprint(c.stdout, f.Redacted())
					return nil
				}
				fmt.Fprintf(c.stdout, "%s: ok (instance %s, %d job(s))\n", f.Path, f.Instance, len(f.Jobs))
				if len(f.Jobs) == 0 {
					fmt.Fprintf(c.stderr, "%s: warning: %s\n", f.Path, service.NoJobsWarning)
				}
				return nil
			}
		},
	}
}
