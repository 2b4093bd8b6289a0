package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/ttysafe"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/acmeflow"
	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
)

func certsCommand() command {
	return command{
		name:    "certs",
		args:    "list | retry DOMAIN... | renew DOMAIN...",
		summary: "show each custom domain's certificate, retry a failing domain now, or renew a certificate now",
		about: `certs list shows every wanted custom domain as the certificate renewer sees it:
its state (valid, due, expired, pending, failing, invalid), its certificate's
not-after and renewal instant, an order in flight, its failures, when it will be
tried again, and the last error (or why its name is invalid). It only reads
PostgreSQL. --failing shows only the domains that are not valid; --json prints
the same as JSON.

certs retry DOMAIN... asks the renewer to try each domain at its next pass
instead of at the end of its back-off (which grows to a day), once the cause of
its failures is fixed: its DNS points at Snip again, its CAA record allows the
CA. Only a request is written; the leader clears the back-off in its own fenced
transaction, and wakes for it within new_domain_check. Every order counts
against order_budget and the CA's limits: retry after the fix, not before. A
domain that is not backing off, or an invalid name, is an error (exit 1).

certs renew DOMAIN... asks the renewer to renew each domain's current
certificate at its next pass, whatever its renewal instant: a private key
thought compromised, a certificate to re-issue. As with retry, only a request is
written and the leader acts on it, fenced, within new_domain_check; the renewal
replaces the current certificate (an ARI renewal where the CA supports it). A
domain without a current certificate, or an invalid name, is an error (exit 1).`,
		flags: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			path := configFlag(fs)
			job := fs.String("job", "", "the certrenew job's name (default: the config's only certrenew job)")
			asJSON := fs.Bool("json", false, "list: print JSON instead of a table")
			failing := fs.Bool("failing", false, "list: only the domains whose state is not valid")
			return func(ctx context.Context, args []string) error {
				switch {
				case len(args) == 1 && args[0] == "list":
				case len(args) > 1 && (args[0] == "retry" || args[0] == "renew"):
				default:
					return usageError("usage: certs list [--failing] [--json] | certs retry DOMAIN... | certs renew DOMAIN...")
				}
				f, err := loadConfig(*path)
				if err != nil {
					writeLines(c.stderr, "", err.Error())
					return &exitError{code: 2, err: errSilent}
				}
				spec, err := jobOfType(f, "certrenew", *job)
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				opts, err := configs.DecodeOptions(spec, certrenew.DefaultOptions)
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				ctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				pool, err := connect.Pool(ctx, f, "certs")
				if err != nil {
					return err
				}
				defer pool.Close()
				by := "operator@" + hostname()
				switch args[0] {
				case "list":
					return listCerts(ctx, c, pool, opts, *failing, *asJSON)
				case "renew":
					return requestRenewals(ctx, c, pool, opts, args[1:], by)
				default:
					return requestRetries(ctx, c, pool, opts, args[1:], by)
				}
			}
		},
	}
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// listCerts is certs list: every wanted domain's state, as a table or JSON.
func listCerts(ctx context.Context, c *cli, pool *pgxpool.Pool, opts certrenew.Options, failing, asJSON bool) error {
	list, err := certrenew.List(ctx, pool, opts)
	if err != nil {
		return err
	}
	if failing {
		list = slices.DeleteFunc(list, func(d certrenew.DomainStatus) bool { return d.State == domainstore.StateValid })
	}
	if asJSON {
		return ttysafe.JSON(c.stdout, list)
	}
	printCerts(c.stdout, list)
	return nil
}

// requestRetries is certs retry: one request per backing-off domain, each
// refusal on stderr.
func requestRetries(ctx context.Context, c *cli, pool *pgxpool.Pool, opts certrenew.Options, names []string, by string) error {
	var failed bool
	for _, raw := range names {
		r, err := certrenew.RequestRetry(ctx, pool, opts, raw, by)
		if err != nil {
			failed = true
			var ie *domainstore.InvalidNameError
			switch {
			case errors.As(err, &ie):
				fmt.Fprintf(c.stderr, "snip-jobs certs retry: %q: invalid name (%s): %s\n", raw, ie.Code, ttysafe.String(ie.Reason))
			case errors.Is(err, certrenew.ErrNotBackingOff):
				fmt.Fprintf(c.stderr, "snip-jobs certs retry: %s has no back-off to end (no failure recorded, or its next attempt is already due): nothing to retry\n", ttysafe.String(r.Name))
			default:
				fmt.Fprintf(c.stderr, "snip-jobs certs retry: %q: %s\n", raw, ttysafe.String(err.Error()))
			}
			continue
		}
		fmt.Fprintf(c.stdout, "%s: retry requested (%d failure(s), last %s; would have been tried at %s); the leader tries it at its next pass\n",
			ttysafe.String(r.Name), r.Failures, ttysafe.String(r.ErrorReason), r.NextAttempt.UTC().Format(time.RFC3339))
		if r.ErrorReason == acmeflow.ReasonRateLimited {
			fmt.Fprintf(c.stderr, "snip-jobs certs retry: warning: %s is waiting for the CA's rate limit (its Retry-After); an order before then is refused again and still spends the order budget\n", ttysafe.String(r.Name))
		}
	}
	if failed {
		return errSilent
	}
	return nil
}

// requestRenewals is certs renew: one request per domain, each refusal on
// stderr.
func requestRenewals(ctx context.Context, c *cli, pool *pgxpool.Pool, opts certrenew.Options, names []string, by string) error {
	var failed bool
	for _, raw := range names {
		r, err := certrenew.RequestRenewal(ctx, pool, opts, raw, by)
		var ie *domainstore.InvalidNameError
		switch {
		case errors.As(err, &ie):
			fmt.Fprintf(c.stderr, "snip-jobs certs renew: %q: invalid name (%s): %s\n", raw, ie.Code, ttysafe.String(ie.Reason))
		case err != nil:
			fmt.Fprintf(c.stderr, "snip-jobs certs renew: %q: %s\n", raw, ttysafe.String(err.Error()))
		default:
			fmt.Fprintf(c.stdout, "%s: renewal requested (current certificate %s, not after %s); the leader renews it at its next pass\n",
				ttysafe.String(r.Name), ttysafe.String(r.Serial), r.NotAfter.UTC().Format(time.RFC3339))
		}
		failed = failed || err != nil
	}
	if failed {
		return errSilent
	}
	return nil
}

// printCerts prints certs list's table. Every string from the database is
// escaped (termsafe): a domain or a CA's error text may hold terminal controls.
func printCerts(w io.Writer, list []certrenew.DomainStatus) {
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04Z")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tSTATE\tNOT AFTER\tRENEW AT\tORDER SINCE\tFAILURES\tNEXT ATTEMPT\tREASON")
	var errs []string
	for _, d := range list {
		next := at(d.NextAttempt)
		if d.RetryAsked != nil {
			next += " (retry requested)"
		}
		reason := d.ErrorReason
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", ttysafe.String(d.Domain), ttysafe.String(d.State),
			at(d.NotAfter), at(d.RenewAt), at(d.OrderStarted), d.Failures, next, ttysafe.String(reason))
		if d.Error != "" {
			errs = append(errs, fmt.Sprintf("%s: %s", ttysafe.String(d.Domain), ttysafe.String(d.Error)))
		}
	}
	tw.Flush()
	if len(errs) > 0 {
		fmt.Fprintln(w)
		for _, e := range errs {
			fmt.Fprintln(w, e)
		}
	}
	if len(list) == 0 {
		fmt.Fprintln(w, "(no wanted custom domains)")
	}
}
