package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/snip/snip-jobs/migrations"
)

// schemaUncheckedError: the schema could not be compared (PostgreSQL did not
// answer, or the comparison failed); nothing is known about it.
type schemaUncheckedError struct{ err error }

func (e *schemaUncheckedError) Error() string {
	return "cannot compare the database schema with this binary's migrations: " + e.err.Error()
}
func (e *schemaUncheckedError) Unwrap() error { return e.err }

// checkSchema compares the database's schema with the migrations built into
// this binary. Migrations the database lacks are an error naming them and the
// command that applies them; versions it has that this binary does not know
// (a newer binary applied them: a rolling upgrade) are logged as a warning.
// A *schemaUncheckedError means nothing could be compared.
func (r *runner) checkSchema(ctx context.Context) error {
	url, err := r.cfg.DatabaseURL()
	if err != nil {
		return fmt.Errorf("database URL: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, schemaTimeout)
	c, err := migrations.Check(cctx, url)
	cancel()
	if err != nil {
		return &schemaUncheckedError{err: err}
	}
	if len(c.Unknown) > 0 {
		r.ilog.Warn("the database has migrations this binary does not know: a newer binary applied them "+
			"(a rolling upgrade, or this binary was rolled back); running on the assumption that the schema is compatible",
			"unknown_versions", c.Unknown, "schema_version", c.Current)
	}
	if len(c.Pending) > 0 {
		return fmt.Errorf("the database schema lacks %d migration(s) this binary needs: %s (schema at version %d); "+
			"apply them with `snip-jobs migrate --config %s` (or set postgres.migrate_on_start: true) and start again",
			len(c.Pending), strings.Join(c.Pending, ", "), c.Current, r.cfg.Path)
	}
	if len(c.Missing) > 0 {
		return fmt.Errorf("the database role lacks privileges this binary needs: %s; grant them with "+
			"`snip-jobs migrate --grant-to ROLE` run as the schema's owner (docs/operations.md, \"Database roles\") and start again",
			strings.Join(c.Missing, ", "))
	}
	r.ilog.Info("the database schema has every migration this binary needs", "schema_version", c.Current)
	return nil
}

// checkSchemaLater compares the schema in the background, every schemaRetry
// until it can (PostgreSQL answers), and sends a lacking schema's error to
// r.schemaErr, which stops the process. A database that does not answer is
// not fatal; it is logged once here and again only at debug level.
func (r *runner) checkSchemaLater(ctx context.Context) {
	ctx, r.stopSchemaCheck = context.WithCancel(ctx)
	r.schemaPending.Store(true)
	r.ilog.Info("the database schema is compared with this binary's migrations once PostgreSQL answers")
	go func() {
		t := time.NewTicker(schemaRetry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			err := r.checkSchema(ctx)
			var cannot *schemaUncheckedError
			if errors.As(err, &cannot) {
				if ctx.Err() == nil {
					r.ilog.Debug("the database schema cannot be compared yet", "err", cannot.err)
				}
				continue
			}
			if err != nil {
				r.schemaErr <- err // buffered; sent once
				return
			}
			r.schemaPending.Store(false)
			return
		}
	}()
}

// schemaReady is /readyz's schema check: an instance is not ready before
// its database's schema was compared with its migrations (a schema that
// lacks one stops the process instead).
func (r *runner) schemaReady(context.Context) error {
	if r.schemaPending.Load() {
		return errors.New("not yet compared with this binary's migrations (PostgreSQL has not answered since start-up)")
	}
	return nil
}
