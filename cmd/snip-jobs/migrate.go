package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/snip/snip-jobs/migrations"
)

// migrateAbout is migrate's help beyond its summary.
const migrateAbout = `Applies every pending schema migration built into this binary to the database
named by the config (postgres.url_env or postgres.url_file), in order, each in
its own transaction. Several servers may run it at once: a PostgreSQL advisory
lock makes one apply the migrations while the others wait and then find nothing
to do. With --status it changes nothing and lists every migration as applied
(with its time) or pending. 'run' applies migrations itself at start when the
config says postgres.migrate_on_start: true.

With --grant-to ROLE (the runtime role the servers connect as, when the
database URL here is the schema owner's), it then grants ROLE exactly what the
service needs on the schema's tables and sequences, in one transaction; run it
again after every upgrade (GRANT is idempotent). Snip's own tables (links,
custom_domains) are granted only when the connected role owns them; for the
others it prints the GRANT their owner must run. docs/operations.md
("Database roles") lists the grants and how to create the roles.

With --grant-fence-to ROLE (a role that programs connect as, which is not the
runtime role), it grants ROLE only what a program needs to fence its own
writes: EXECUTE on the function snip_jobs_fence, which advances
fencing_tokens by the fence's rule with the owner's rights, so that ROLE can
fence but cannot write fencing_tokens by hand (docs/operations.md, "Fencing
from a program").`

func migrateCommand() command {
	return command{
		name:    "migrate",
		summary: "apply the database schema migrations built into this binary",
		about:   migrateAbout,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			status := fs.Bool("status", false, "list migrations as applied or pending; change nothing")
			grantTo := fs.String("grant-to", "", "after migrating, grant this role (the servers' runtime role) what the service needs")
			grantFenceTo := fs.String("grant-fence-to", "", "after migrating, grant this role (programs' role) the fence function, and nothing else")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usageError("usage: migrate takes no arguments")
				}
				if *status && (*grantTo != "" || *grantFenceTo != "") {
					return usageError("usage: migrate --status changes nothing; --grant-to and --grant-fence-to do")
				}
				f, err := loadConfig(*path)
				if err != nil {
					writeLines(c.stderr, "", err.Error())
					return &exitError{code: 2, err: errSilent}
				}
				url, err := f.DatabaseURL()
				if err != nil {
					return fmt.Errorf("database URL: %w", err)
				}
				if *status {
					return printMigrationStatus(ctx, c, url)
				}
				log := newLogger(f.Log, c.stderr)
				res, err := migrations.Up(ctx, url, log)
				if err != nil {
					return err
				}
				if len(res.Applied) == 0 {
					fmt.Fprintf(c.stdout, "schema up to date at version %d\n", res.Current)
				} else {
					vs := make([]string, len(res.Applied))
					for i, v := range res.Applied {
						vs[i] = strconv.FormatInt(v, 10)
					}
					fmt.Fprintf(c.stdout, "applied %d migration(s) (%s); schema at version %d\n", len(vs), strings.Join(vs, ", "), res.Current)
				}
				return grantRoles(ctx, c, url, *grantTo, *grantFenceTo)
			}
		},
	}
}

// printMigrationStatus lists every migration as applied (with its time) or
// pending: migrate --status.
func printMigrationStatus(ctx context.Context, c *cli, url string) error {
	st, err := migrations.Status(ctx, url)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tFILE\tSTATE\tAPPLIED AT")
	pending := 0
	for _, m := range st {
		state, at := "pending", "-"
		if m.Applied {
			state, at = "applied", m.AppliedAt.Format("2006-01-02 15:04:05Z07:00")
		} else {
			pending++
		}
		fmt.Fprintf(tw, "%04d\t%s\t%s\t%s\n", m.Version, m.Name, state, at)
	}
	tw.Flush()
	fmt.Fprintf(c.stdout, "%d pending\n", pending)
	return nil
}

// grantRoles grants the runtime role (--grant-to) and the programs' role
// (--grant-fence-to), each when named.
func grantRoles(ctx context.Context, c *cli, url, runtime, fence string) error {
	if runtime != "" {
		notes, err := migrations.Grant(ctx, url, runtime)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "granted role %s what the service needs\n", runtime)
		for _, n := range notes {
			fmt.Fprintf(c.stderr, "snip-jobs migrate: warning: %s\n", n)
		}
	}
	if fence != "" {
		if err := migrations.GrantFence(ctx, url, fence); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "granted role %s the fence (snip_jobs_fence)\n", fence)
	}
	return nil
}
