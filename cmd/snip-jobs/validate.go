package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/goccy/go-yaml"
	yamlparser "github.com/goccy/go-yaml/parser"

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

It also examines the secret files the config names that exist where it runs,
as run will at start, and says what run will say: a file that is not a regular
file, larger than a secret, writable by its group or others, or readable by them
is reported on standard error with the reason and the fix, and the exit status
is 2. With --allow-readable-secrets, as with run's, a file others can only read
is a warning instead (exit status 0); the others stay errors. A secret file
that does not exist here is not reported: run reports it when it reads it.

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
						fmt.Fprintf(c.stderr, "%s: %s\n", settingPos(f.Path, "kubernetes.kubeconfig"), problem)
						return &exitError{code: 2, err: errSilent}
					case unread != nil:
						fmt.Fprintf(c.stderr, "%s: warning: kubernetes.kubeconfig cannot be read here, so its context's server and TLS settings "+
							"were not checked (run checks them): %v\n", f.Path, unread)
					}
				}
				warnings, err := service.CheckSecretFiles(f, *allowReadable)
				for _, p := range warnings {
					fmt.Fprintf(c.stderr, "%s: warning: %s: %s\n", f.Path, service.ReadableSecretWarning, p)
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

// settingPos is "file:line:col" of setting's value (a dotted path, e.g.
// kubernetes.kubeconfig) in the config file at path, or path alone when it
// cannot be found.
func settingPos(path, setting string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return path
	}
	file, err := yamlparser.ParseBytes(data, 0)
	if err != nil {
		return path
	}
	p, err := yaml.PathString("$." + setting)
	if err != nil {
		return path
	}
	n, err := p.FilterFile(file)
	if err != nil || n == nil || n.GetToken() == nil {
		return path
	}
	pos := n.GetToken().Position
	return fmt.Sprintf("%s:%d:%d", path, pos.Line, pos.Column)
}
