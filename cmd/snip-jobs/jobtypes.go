package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/aggregator"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certsync"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/scheduler"
)

// registry is every job type built into this binary: the one place to add one.
func registry() *scheduler.Registry {
	r, err := scheduler.NewRegistry(
		sqlType(),
		aggregator.Type(),
		weeklyreport.Type(),
		certrenew.Type(),
		certsync.Type(),
	)
	if err != nil {
		panic(fmt.Sprintf("snip-jobs: job type registry: %v", err)) // a programming error
	}
	return r
}

// sqlOptions are the options of a job of type sql.
type sqlOptions struct {
	// Statement is one SQL statement. It may use the named parameters @job,
	// @instance, @token (0 when the job is not a singleton) and @slot (the cron
	// slot's instant, NULL for other schedules).
	Statement string `yaml:"statement"`
	// Resource is the fencing resource of a singleton's statement (default: the
	// job's name). Not allowed in database mode, where each slot is fenced on
	// its own.
	Resource string `yaml:"resource"`
}

func (o *sqlOptions) Validate() error {
	var errs []error
	if strings.TrimSpace(o.Statement) == "" {
		errs = append(errs, errors.New("statement is required"))
	}
	if o.Resource != "" && strings.ContainsFunc(o.Resource, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		errs = append(errs, fmt.Errorf("resource %q: no spaces or control characters", o.Resource))
	}
	return errors.Join(errs...)
}

// sqlType runs one SQL statement per run: pruning old rows, refreshing a
// materialized view, calling a maintenance function. A singleton's statement
// runs inside Run.Fenced, so a leader whose term was superseded cannot run it
// after its successor has; a cron singleton's slot is completed in the same
// transaction, so a slot's statement commits exactly once. A job that runs
// everywhere executes the statement plainly on every instance.
func sqlType() scheduler.Type {
	return scheduler.Type{
		Name:    "sql",
		Doc:     "runs one SQL statement (e.g. pruning old rows), fenced by the term's token when the job is a singleton",
		Options: func() any { return &sqlOptions{} },
		New: func(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
			o, ok := spec.Options.(*sqlOptions)
			if !ok || o == nil {
				return nil, errors.New("sql: options missing (statement is required)")
			}
			if env.Pool == nil {
				return nil, errors.New("sql: needs PostgreSQL")
			}
			dbMode := spec.Singleton && spec.Schedule.Kind == configs.Cron && spec.Schedule.Coordination == configs.Database
			if dbMode && o.Resource != "" {
				return nil, errors.New("sql: resource cannot be set in database mode (each slot is fenced on its own)")
			}
			return &sqlJob{pool: env.Pool, statement: o.Statement, resource: o.Resource}, nil
		},
	}
}

type sqlJob struct {
	pool      *pgxpool.Pool
	statement string
	resource  string // "" = the run's default
}

func (j *sqlJob) Run(ctx context.Context, r *scheduler.Run) error {
	args := pgx.NamedArgs{"job": r.Job, "instance": r.Instance, "token": r.Token, "slot": nil}
	if !r.Slot.IsZero() {
		args["slot"] = r.Slot
	}
	var tag pgconn.CommandTag
	var err error
	if r.Token > 0 {
		fn := func(ctx context.Context, tx pgx.Tx) error {
			var err error
			if tag, err = tx.Exec(ctx, j.statement, args); err != nil {
				return err
			}
			if !r.Slot.IsZero() {
				return r.CompleteSlot(ctx, tx)
			}
			return nil
		}
		if j.resource != "" {
			err = r.FencedOn(ctx, j.resource, fn)
		} else {
			err = r.Fenced(ctx, fn)
		}
	} else {
		tag, err = j.pool.Exec(ctx, j.statement, args)
	}
	if err != nil {
		return fmt.Errorf("sql: %w", err)
	}
	r.Progress()
	if n := tag.RowsAffected(); n > 0 {
		r.Log.Info("statement done", "command", tag.String(), "rows", n)
	} else {
		r.Log.Debug("statement done", "command", tag.String(), "rows", n)
	}
	return nil
}
