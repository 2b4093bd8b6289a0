package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/snip/snip-jobs/app/service"
)

func validateCommand() command {
	return command{
		name:    "validate",
		summary: "check a config file and report every problem with its file:line",
		about: `Reads the config file and checks all of it: unknown or duplicate keys, unknown job
types, job options, bad durations and cron specs, leadership timing, and more.
Every problem is printed on standard error as file:line:col: message, and the
exit status is 2; a valid file exits 0. Nothing is contacted: validate needs
neither etcd nor PostgreSQL, so it can run wherever the file is written. With
--print it shows the effective configuration, every default filled in (secrets
are never in it: only where they are read from).

Job types built into this binary: ` + strings.Join(registry().Names(), ", ") + `.`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			print := fs.Bool("print", false, "print the effective configuration (defaults filled in)")
			return func(_ context.Context, args []string) error {
				if len(args) > 0 {
					return usageError("usage: validate takes no arguments (the file is given by --config)")
				}
				f, err := loadConfig(*path)
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
