// Package sqljob is the built-in job type "sql": one SQL statement per run,
// inside the term's fenced transaction when the job is a singleton (and with
// the completion of the cron slot or the manual run it is for, so that its
// statement commits exactly once), plainly on every instance otherwise.
//
// What is guaranteed: exactly one statement runs per run, sent with
// PostgreSQL's extended protocol (which refuses several), and never
// transaction control: validate refuses both at the statement's line, and a
// statement that ends the fenced transaction anyway fails the run before its
// slot is marked done. What is not: the statement is trusted operator input
// (it runs with the service's role and may do anything that role may).
//
// A run's statement never touches a connection anyone else uses: each run
// opens a connection of its own (with the pool's settings, beside the pool:
// one more connection to PostgreSQL while a sql job runs) and closes it at
// the end, so whatever the statement left on its session — SET ROLE,
// set_config(…, false), temporary tables, prepared statements, LISTEN,
// cursors WITH HOLD, session-level advisory locks — ends with it instead of
// reaching the next job or the scheduler through the shared pool.
package sqljob

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/sqltext"
	"github.com/snip/snip-jobs/scheduler"
)

// Options are the options of a job of type sql.
type Options struct {
	// Statement is exactly one SQL statement, not transaction control:
	// trusted operator input, run with the service's role. It may use the
	// named parameters @job, @instance, @token (0 when the job is not a
	// singleton), @slot (the cron slot's instant, NULL for other
	// schedules), @trigger (schedule, catch-up or manual) and @manual_run
	// (the id of the operator's manual run request, `snip-jobs run JOB`;
	// NULL for runs of the schedule).
	Statement string `yaml:"statement"`
	// Resource is the fencing resource of a singleton's statement (default: the
	// job's name). Not allowed in database mode, where each slot is fenced on
	// its own.
	Resource string `yaml:"resource"`
}

func (o *Options) Validate() error {
	var errs []error
	if strings.TrimSpace(o.Statement) == "" {
		errs = append(errs, errors.New("statement is required"))
	} else if err := checkStatement(o.Statement); err != nil {
		errs = append(errs, &configs.OptionError{Key: "statement", Err: err})
	}
	if o.Resource != "" && strings.ContainsFunc(o.Resource, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		errs = append(errs, fmt.Errorf("resource %q: no spaces or control characters", o.Resource))
	}
	return errors.Join(errs...)
}

// transactionControl are the statements that end, start or split a
// transaction: a singleton's statement runs inside the term's fenced
// transaction, which they would commit early or leave (COMMIT AND CHAIN goes
// on unfenced), so they are refused, whatever the job's mode.
var transactionControl = [][]string{
	{"BEGIN"}, {"START", "TRANSACTION"}, {"COMMIT"}, {"END"}, {"ROLLBACK"}, {"ABORT"},
	{"SAVEPOINT"}, {"RELEASE"}, {"PREPARE", "TRANSACTION"},
	{"SET", "TRANSACTION"}, {"SET", "SESSION", "CHARACTERISTICS"},
}

// checkStatement says what is wrong with a sql job's statement: no
// statement (only comments), more than one, or transaction control. The
// statement's own text is judged, as PostgreSQL's lexer splits it, not the
// option's: "; COMMIT" is one statement, COMMIT, behind an empty one.
func checkStatement(text string) error {
	stmts := sqltext.Split(text)
	switch {
	case len(stmts) == 0:
		return errors.New("holds no statement, only comments or semicolons")
	case len(stmts) > 1:
		return fmt.Errorf("holds %d statements (the second starts at character %d: %q); a job runs exactly one: "+
			"put the others in jobs of their own, or in a function", len(stmts), utf8.RuneCountInString(text[:stmts[1].Start])+1, abbreviate(stmts[1].Text))
	}
	words := sqltext.Words(stmts[0].Text, 3)
	for _, tc := range transactionControl {
		if len(words) >= len(tc) && slices.Equal(words[:len(tc)], tc) {
			return fmt.Errorf("%s is transaction control, which a job's statement must not use: "+
				"a singleton's statement runs inside the term's fenced transaction and must not end it", strings.Join(tc, " "))
		}
	}
	return nil
}

// abbreviate shortens a statement for a message.
func abbreviate(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}

// Type runs one SQL statement per run: pruning old rows, refreshing a
// materialized view, calling a maintenance function. A singleton's statement
// runs inside Run.Fenced, so a leader whose term was superseded cannot run it
// after its successor has; a cron singleton's slot is completed in the same
// transaction, so a slot's statement commits exactly once. A job that runs
// everywhere executes the statement plainly on every instance.
func Type() scheduler.Type {
	return scheduler.Type{
		Name:    "sql",
		Doc:     "runs one SQL statement (e.g. pruning old rows), fenced by the term's token when the job is a singleton",
		Options: configs.OptionsOf(noOptions),
		New: func(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
			if !spec.Options.Present() {
				return nil, errors.New("sql: options missing (statement is required)")
			}
			// Decoded without Validate: whatever reaches the job (validate is
			// a separate step) still runs as one statement inside the fence.
			o, err := configs.DecodeOptions(spec, func() unchecked { return unchecked{} })
			if err != nil {
				return nil, err
			}
			if env.Pool == nil {
				return nil, errors.New("sql: needs PostgreSQL")
			}
			if spec.Mode() == configs.ModeDatabase && o.Resource != "" {
				return nil, errors.New("sql: resource cannot be set in database mode (each slot is fenced on its own)")
			}
			return &job{pool: env.Pool, statement: o.Statement, resource: o.Resource}, nil
		},
	}
}

// noOptions are a sql job's options before its entry's: none set.
func noOptions() Options { return Options{} }

// unchecked are Options without their Validate method.
type unchecked Options

type job struct {
	pool      *pgxpool.Pool
	statement string
	resource  string // "" = the run's default
}

func (j *job) Run(ctx context.Context, r *scheduler.Run) error {
	args := pgx.NamedArgs{"job": r.Job, "instance": r.Instance, "token": r.Token, "slot": nil,
		"trigger": string(r.Trigger), "manual_run": nil}
	if !r.Slot.IsZero() {
		args["slot"] = r.Slot
	}
	if r.ManualRun != 0 {
		args["manual_run"] = r.ManualRun
	}
	conn, err := j.connect(ctx)
	if err != nil {
		return fmt.Errorf("sql: %w", err)
	}
	defer closeConn(ctx, conn)
	var tag pgconn.CommandTag
	if r.Token > 0 {
		fn := func(ctx context.Context, tx pgx.Tx) error {
			var err error
			if tag, err = execOne(ctx, tx.Conn(), j.statement, args); err != nil {
				return err
			}
			if err := stillInTransaction(tx.Conn(), tag); err != nil {
				return err
			}
			// The cron slot or the manual run the run is for commits with
			// the statement, once.
			return r.Complete(ctx, tx)
		}
		err = r.FencedConn(ctx, conn, j.resource, fn)
	} else {
		tag, err = execOne(ctx, conn, j.statement, args)
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

// connect opens the run's own connection, with the pool's settings (URL,
// TLS, connect timeout, application_name).
func (j *job) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, j.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("connect for the statement: %w", err)
	}
	return conn, nil
}

// closeConn ends the run's connection, and with it its session. The close
// is bounded on its own (the run's context may be over): pgx closes the
// socket whatever the server does.
func closeConn(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_ = conn.Close(cctx)
}

// closeTimeout bounds the goodbye to PostgreSQL when the run's connection
// closes.
const closeTimeout = 5 * time.Second

// execOne runs statement with PostgreSQL's extended protocol, which refuses
// text holding more than one statement ("cannot insert multiple commands into
// a prepared statement"). pgx sends a statement without arguments with the
// simple protocol, which would run every statement of the text, a COMMIT among
// them: so the named arguments are bound here, and a statement left without
// any is sent with ExecParams.
func execOne(ctx context.Context, conn *pgx.Conn, statement string, named pgx.NamedArgs) (pgconn.CommandTag, error) {
	sql, args, err := named.RewriteQuery(ctx, conn, statement, nil)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	if len(args) > 0 {
		// The mode is explicit: the URL's default_query_exec_mode may say simple_protocol.
		return conn.Exec(ctx, sql, append([]any{pgx.QueryExecModeCacheStatement}, args...)...)
	}
	res := conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Read()
	return res.CommandTag, res.Err
}

// stillInTransaction refuses a statement that ended or replaced the fenced
// transaction (validate refuses transaction control; this holds whatever
// reached the job): what follows must not run unfenced.
func stillInTransaction(conn *pgx.Conn, tag pgconn.CommandTag) error {
	if conn.PgConn().TxStatus() != 'T' {
		return fmt.Errorf("the statement ended the fenced transaction (%s): transaction control is not allowed", tag)
	}
	switch tag.String() {
	case "BEGIN", "START TRANSACTION", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PREPARE TRANSACTION":
		return fmt.Errorf("the statement is transaction control (%s), which a job's statement must not use", tag)
	}
	return nil
}
