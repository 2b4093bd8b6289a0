package sqljob_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/sqljob"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/slots"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }

// The sql type: a singleton's statement is fenced by its token, a cron
// singleton's slot completes in the statement's own transaction, and a job that
// runs everywhere executes plainly.
func TestSQLJobFencesSingletonsAndCompletesCronSlotsWithTheStatement(t *testing.T) {
	ctx := context.Background()
	url, pool := runtimeDB(t)
	file, err := configs.Parse("test.yaml", []byte(`
instance: server-a
jobs:
  - name: stamp
    type: sql
    cron: "* * * * *"
    options:
      statement: INSERT INTO pulses (instance, token) VALUES (@instance, @token)
`), registry(t))
	if err != nil {
		t.Fatal(err)
	}
	typ := sqljob.Type()
	job, err := typ.New(scheduler.Env{Instance: "server-a", Pool: pool}, file.Jobs[0])
	if err != nil {
		t.Fatal(err)
	}
	fence := fencing.New(pool, "server-a")
	slot := time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	benchtest.Exec(t, pool, `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ('stamp', '2026-11-23T07:00:00Z', 'running', 20, 'server-a')`)
	run := func(token int64, slot time.Time) error {
		var f *fencing.Fence
		if token > 0 {
			f = fence
		}
		return job.Run(ctx, scheduler.NewRun(scheduler.RunConfig{Job: "stamp", Instance: "server-a", Token: token, Slot: slot, Fence: f}))
	}

	if err := run(20, slot); err != nil {
		t.Fatalf("run of the claimed slot: %v", err)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM cron_slots WHERE job = 'stamp' AND slot = $1`, slot).Scan(&state); err != nil || state != "done" {
		t.Fatalf("slot state %q, %v; want done in the statement's transaction", state, err)
	}
	if err := run(19, time.Time{}); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("a run with an older token: %v, want a stale-token error", err)
	}
	if err := run(0, time.Time{}); err != nil {
		t.Fatalf("a run that is not a singleton: %v", err)
	}
	got := pulses(t, url)
	if len(got) != 2 || got[0].token != 20 || got[1].token != 0 {
		t.Fatalf("rows %+v: want the token-20 run and the unfenced one, nothing from token 19", got)
	}
}

// runtimeDB is a database set up as docs/operations.md says with the pulses
// table granted to the runtime role: the superuser's URL (for checks) and a
// pool as the runtime role (the job's).
func runtimeDB(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	db := dbtest.NewDB(t)
	dbtest.Exec(t, db.Owner, pulsesTable+"; GRANT INSERT ON pulses TO "+dbtest.RuntimeRole+"; GRANT USAGE ON SEQUENCE pulses_id_seq TO "+dbtest.RuntimeRole)
	return db.Super, dbtest.Pool(t, db.Runtime)
}

// A statement on a table the runtime role was not granted fails with
// PostgreSQL's words naming the table.
func TestASQLStatementWithoutItsGrantFailsNamingTheTable(t *testing.T) {
	_, pool := runtimeDB(t)
	typ := sqljob.Type()
	job, err := typ.New(scheduler.Env{Instance: "server-a", Pool: pool}, configs.Job{Name: "prune", Type: "sql",
		Options: jobtest.Options(t, sqljob.Options{Statement: "DELETE FROM pulses WHERE token < @token"}), Schedule: configs.Schedule{Kind: configs.Interval}})
	if err != nil {
		t.Fatal(err)
	}
	err = job.Run(context.Background(), scheduler.NewRun(scheduler.RunConfig{Job: "prune", Instance: "server-a", Token: 3, Fence: fencing.New(pool, "server-a")}))
	if err == nil || !strings.Contains(err.Error(), "permission denied for table pulses") {
		t.Errorf("a DELETE the runtime role was not granted: %v; want the refusal naming pulses", err)
	}
}

// Whatever reaches the job (validate is a separate step), its statement is
// sent with the extended protocol, which refuses several statements: a COMMIT
// can no longer end the fenced transaction and let an INSERT escape the fence,
// and a statement that ends or replaces the transaction on its own fails the
// run before the cron slot is marked done.
func TestTheSQLJobRunsOneStatementInsideTheFenceWhateverItIsGiven(t *testing.T) {
	ctx := context.Background()
	url, pool := runtimeDB(t)
	fence := fencing.New(pool, "server-a")
	slot := time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	benchtest.Exec(t, pool, `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ('stamp', '2026-11-23T07:00:00Z', 'running', 20, 'server-a')`)
	typ := sqljob.Type()
	run := func(statement string, token int64, slot time.Time) error {
		spec := configs.Job{Name: "stamp", Type: "sql", Singleton: token > 0, Options: jobtest.Options(t, sqljob.Options{Statement: statement}),
			Schedule: configs.Schedule{Kind: configs.Interval}}
		job, err := typ.New(scheduler.Env{Instance: "server-a", Pool: pool}, spec)
		if err != nil {
			t.Fatal(err)
		}
		var f *fencing.Fence
		if token > 0 {
			f = fence
		}
		return job.Run(ctx, scheduler.NewRun(scheduler.RunConfig{Job: "stamp", Instance: "server-a", Token: token, Slot: slot, Fence: f}))
	}

	for _, c := range []struct {
		statement string
		token     int64
	}{
		{"COMMIT; INSERT INTO pulses (instance, token) VALUES ('escaped', 1)", 20}, // no arguments: pgx would use the simple protocol
		{"COMMIT; INSERT INTO pulses (instance, token) VALUES (@instance, @token)", 20},
		{"SELECT 1; SELECT 2", 20},
		{"SELECT 1; SELECT 2", 0},
		{"INSERT INTO pulses (instance, token) VALUES ('everywhere', 0); SELECT 2", 0},
	} {
		err := run(c.statement, c.token, time.Time{})
		if err == nil || !strings.Contains(err.Error(), "cannot insert multiple commands into a prepared statement") {
			t.Errorf("statement %q (token %d): %v; want PostgreSQL's refusal of several statements", c.statement, c.token, err)
		}
	}
	for _, statement := range []string{"COMMIT", "COMMIT AND CHAIN", "ROLLBACK", "ROLLBACK AND CHAIN"} {
		if err := run(statement, 20, slot); err == nil || !strings.Contains(err.Error(), "transaction control") {
			t.Errorf("statement %q at a cron slot: %v; want a refusal naming transaction control", statement, err)
		}
	}
	if got := pulses(t, url); len(got) != 0 {
		t.Errorf("rows %+v were written; want none", got)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM cron_slots WHERE job = 'stamp' AND slot = $1`, slot).Scan(&state); err != nil || state != "running" {
		t.Errorf("slot state %q, %v; want running: no statement that ended the fenced transaction may complete it", state, err)
	}
	// One statement with no arguments runs (through ExecParams).
	if err := run("INSERT INTO pulses (instance, token) VALUES ('plain', 0)", 0, time.Time{}); err != nil {
		t.Fatalf("one statement without arguments: %v", err)
	}
}

const pulsesTable = `CREATE TABLE pulses (id bigserial PRIMARY KEY, instance text NOT NULL, token bigint NOT NULL)`

func registry(t *testing.T) *scheduler.Registry {
	t.Helper()
	r, err := scheduler.NewRegistry(sqljob.Type())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// pulse is one row of the pulses table.
type pulse struct {
	instance string
	token    int64
}

func pulses(t *testing.T, url string) []pulse {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT instance, token FROM pulses ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pulse, error) {
		var p pulse
		return p, r.Scan(&p.instance, &p.token)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// `validate` refuses a statement that is several, or transaction control, at
// the statement's line, naming the job.
func TestValidateRefusesSeveralStatementsAndTransactionControl(t *testing.T) {
	refused := []struct{ statement, phrase string }{
		{"SELECT 1; SELECT 2", `holds 2 statements (the second starts at character 10: "SELECT 2")`},
		{"COMMIT; INSERT INTO pulses (instance, token) VALUES ('x', 1)", "holds 2 statements"},
		{"commit", "COMMIT is transaction control"},
		{"COMMIT AND CHAIN", "COMMIT is transaction control"},
		{"END", "END is transaction control"},
		{"/* first */ begin", "BEGIN is transaction control"},
		{"START TRANSACTION ISOLATION LEVEL SERIALIZABLE", "START TRANSACTION is transaction control"},
		{"rollback", "ROLLBACK is transaction control"},
		{"SAVEPOINT a", "SAVEPOINT is transaction control"},
		{"RELEASE SAVEPOINT a", "RELEASE is transaction control"},
		{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET TRANSACTION is transaction control"},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", "SET SESSION CHARACTERISTICS is transaction control"},
		{"PREPARE TRANSACTION 'x'", "PREPARE TRANSACTION is transaction control"},
		// Behind empty statements, comments, in any case: the statement is
		// what PostgreSQL's lexer makes of the text, not the text.
		{"; COMMIT", "COMMIT is transaction control"},
		{";;commit;", "COMMIT is transaction control"},
		{"/* first; */ ; -- then;\n End Work", "END is transaction control"},
		{"\n;\tabort", "ABORT is transaction control"},
		{"; COMMIT AND CHAIN", "COMMIT is transaction control"},
		{"; ROLLBACK PREPARED 'x'", "ROLLBACK is transaction control"},
		{"; savepoint s", "SAVEPOINT is transaction control"},
		{"; Prepare Transaction 'x'", "PREPARE TRANSACTION is transaction control"},
		{";", "holds no statement, only comments or semicolons"},
		{"-- nothing; really\n;", "holds no statement"},
	}
	for _, c := range refused {
		_, err := configs.Parse("jobs.yaml", sqlJobYAML(c.statement), registry(t))
		want := `jobs.yaml:7:18: job "stamp": options.statement: ` + c.phrase
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("statement %q: got %v\nwant a problem starting %q", c.statement, err, want)
		}
	}
	for _, ok := range []string{
		"DELETE FROM pulses WHERE token < @token;",
		"SELECT ';' AS semicolon -- and; a comment",
		"DO $$ BEGIN PERFORM 1; END $$",
		"SET LOCAL lock_timeout = '1s'",
		"SELECT set_config('x.y', 'commit', true)",
		`SELECT 1 AS "; COMMIT"`, // a quoted identifier is no statement
		`SELECT "commit" FROM pulses`,
		"SELECT $$; COMMIT$$",
	} {
		if _, err := configs.Parse("jobs.yaml", sqlJobYAML(ok), registry(t)); err != nil {
			t.Errorf("statement %q refused: %v", ok, err)
		}
	}
}

// sqlJobYAML is a config with one sql job; the statement's value starts at
// line 7, column 18.
func sqlJobYAML(statement string) []byte {
	return []byte(`instance: server-a
jobs:
  - name: stamp
    type: sql
    every: 1m
    options:
      statement: ` + strconv.Quote(statement) + "\n")
}

// A sql job's statement cannot change the session of anyone after it. Each
// statement below leaves state on the session it ran on — a role, a search
// path, a temporary table named like the scheduler's, a prepared statement,
// a LISTEN, a session-level advisory lock, a cursor WITH HOLD — run as a job
// that runs everywhere and as a singleton, through a pool of one connection
// (so any connection it handed back would be the next user's). After it,
// the pool's connection is as it was, another job's fenced INSERT works, and
// so do the scheduler's own queries: a cron job's slots read, skipped,
// claimed, run and recorded through the same pool.
func TestASQLStatementLeavesNothingOnTheConnectionsOthersUse(t *testing.T) {
	ctx := context.Background()
	db := dbtest.NewDB(t)
	dbtest.Exec(t, db.Owner, pulsesTable+"; GRANT SELECT, INSERT ON pulses TO "+dbtest.RuntimeRole+"; GRANT USAGE ON SEQUENCE pulses_id_seq TO "+dbtest.RuntimeRole)
	// A role the runtime role may become, with none of its grants.
	dbtest.Exec(t, db.Super, `DO $$ BEGIN CREATE ROLE sqljob_elevated NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
		GRANT sqljob_elevated TO `+dbtest.RuntimeRole)
	leaks := []string{
		"SET ROLE sqljob_elevated",
		"SELECT set_config('search_path', 'pg_temp', false)",
		"CREATE TEMP TABLE cron_slots (job text)",
		"PREPARE snip_leak AS SELECT 1",
		"LISTEN snip_leak",
		"SELECT pg_advisory_lock(4242 + @token)",
		"DECLARE snip_leak CURSOR WITH HOLD FOR SELECT 1",
	}
	typ := sqljob.Type()
	newJob := func(pool *pgxpool.Pool, name, statement string, singleton bool) scheduler.Job {
		t.Helper()
		job, err := typ.New(scheduler.Env{Instance: "server-a", Pool: pool}, configs.Job{Name: name, Type: "sql", Singleton: singleton,
			Options: jobtest.Options(t, sqljob.Options{Statement: statement}), Schedule: configs.Schedule{Kind: configs.Interval}})
		if err != nil {
			t.Fatal(err)
		}
		return job
	}
	token := int64(10)
	for i, leak := range leaks {
		for _, singleton := range []bool{false, true} {
			what := fmt.Sprintf("%q (singleton %v)", leak, singleton)
			pool := onePool(t, db.Runtime)
			fence := fencing.New(pool, "server-a")
			before := session(t, pool)

			token++
			var f *fencing.Fence
			var tok int64
			if singleton {
				f, tok = fence, token
			}
			if err := newJob(pool, "leak", leak, singleton).Run(ctx, scheduler.NewRun(scheduler.RunConfig{
				Job: "leak", Instance: "server-a", Token: tok, Fence: f})); err != nil {
				t.Fatalf("%s: %v", what, err)
			}

			if after := session(t, pool); after != before {
				t.Errorf("%s: the pool's connection changed:\n before %+v\n after  %+v", what, before, after)
			}
			if err := newJob(pool, "stamp", "INSERT INTO pulses (instance, token) VALUES (@instance, @token)", true).Run(ctx,
				scheduler.NewRun(scheduler.RunConfig{Job: "stamp", Instance: "server-a", Token: token, Fence: fence})); err != nil {
				t.Errorf("%s: another job's fenced INSERT after it: %v", what, err)
			}
			if err := newJob(pool, "everywhere", "INSERT INTO pulses (instance, token) VALUES (@instance, @token)", false).Run(ctx,
				scheduler.NewRun(scheduler.RunConfig{Job: "everywhere", Instance: "server-a"})); err != nil {
				t.Errorf("%s: another job's INSERT after it: %v", what, err)
			}
			cronJob := fmt.Sprintf("cron-%d-%v", i, singleton)
			if got := sweepTwice(t, pool, fence, cronJob, token, newJob(pool, cronJob, "INSERT INTO pulses (instance, token) VALUES (@instance, @token)", true)); got != "skipped done" {
				t.Errorf("%s: the scheduler's cron slots after it: %q, want the first sweep's slot skipped and the second's done", what, got)
			}
		}
	}
}

// sessionState is what a session may carry from one user to the next.
type sessionState struct {
	user, searchPath                             string
	prepared, channels, locks, cursors, tempRels int64
}

// session reads the state of the session of pool's one connection.
func session(t *testing.T, pool *pgxpool.Pool) sessionState {
	t.Helper()
	var s sessionState
	if err := pool.QueryRow(context.Background(), `SELECT current_user::text, current_setting('search_path'),
		(SELECT count(*) FROM pg_prepared_statements WHERE name = 'snip_leak'),
		(SELECT count(*) FROM pg_listening_channels()),
		(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
		(SELECT count(*) FROM pg_cursors),
		(SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema())`).Scan(
		&s.user, &s.searchPath, &s.prepared, &s.channels, &s.locks, &s.cursors, &s.tempRels); err != nil {
		t.Fatalf("read the pool connection's session: %v", err)
	}
	return s
}

// onePool is a pool of one connection on url, closed when the test ends.
func onePool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// sweepTwice has the scheduler's slots sweep a cron job (a slot a minute)
// through pool twice, a minute apart, as its leader with token: the first
// sweep records its slot skipped (history starts there), the second claims
// the next slot, runs job for it and records it. It returns the states of
// the job's slots, oldest first.
func sweepTwice(t *testing.T, pool *pgxpool.Pool, fence *fencing.Fence, name string, token int64, job scheduler.Job) string {
	t.Helper()
	ctx := context.Background()
	c := &slots.Cron{
		Job: slots.Job{Name: name, Grace: time.Second, Log: benchtest.Logger(t),
			Schedule: configs.Schedule{Kind: configs.Cron, Spec: jobtest.Grid(time.Minute), Location: time.UTC, CatchUp: configs.Latest, CatchUpWindow: time.Hour}},
		Claims: slots.Leader(fence, "server-a", token, func() bool { return true }),
		Pool:   pool, Fence: fence, OnTime: time.Minute,
		Run: func(ctx context.Context, cl slots.Claim, valid func() bool) error {
			return job.Run(ctx, scheduler.NewRun(scheduler.RunConfig{Job: name, Instance: "server-a", Token: cl.Token, Slot: cl.Slot, Fence: fence, Valid: valid}))
		},
		EndsLead: func(error) bool { return false },
	}
	first := time.Date(2026, 11, 23, 7, 0, 30, 0, time.UTC)
	for _, now := range []time.Time{first, first.Add(time.Minute)} {
		if err := c.SweepAt(ctx, now); err != nil {
			t.Errorf("sweep of %s at %s: %v", name, now.Format(time.TimeOnly), err)
		}
	}
	var states string
	if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(state, ' ' ORDER BY slot), '') FROM cron_slots WHERE job = $1`, name).Scan(&states); err != nil {
		t.Errorf("read %s's slots: %v", name, err)
	}
	return states
}
