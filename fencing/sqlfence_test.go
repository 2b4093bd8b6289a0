package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/notify"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// The SQL fence, snip_jobs_fence (migration 0017), is the fence for programs
// in any language: called first in the program's own transaction, it applies
// Fence.Do's rule to the same table. These tests write through it beside Go
// writers, on one resource, and hold the two to one rule.

// staleTokenCode is snip_jobs_fence's SQLSTATE for a refused write.
const staleTokenCode = "SJ001"

// program is a program's connection to the database (application_name app),
// writing as holder: its writes are fenced by snip_jobs_fence.
type program struct {
	t      testing.TB
	conn   *pgx.Conn
	app    string
	holder string
	pid    int32
}

func (d *db) program(app, holder string) *program {
	d.t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(d.url)
	if err != nil {
		d.t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { conn.Close(context.Background()) })
	p := &program{t: d.t, conn: conn, app: app, holder: holder, pid: int32(conn.PgConn().PID())}
	return p
}

// fence opens a transaction and fences it: BEGIN, then snip_jobs_fence, as a
// program does. On a refusal the transaction is rolled back and nil returned.
func (p *program) fence(ctx context.Context, resource string, token int64) (pgx.Tx, error) {
	tx, err := p.conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, "SELECT snip_jobs_fence($1, $2, $3)", resource, token, p.holder); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

// write is a program's whole fenced write: one row of reports.
func (p *program) write(ctx context.Context, resource string, token int64, body string) error {
	tx, err := p.fence(ctx, resource, token)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := insertReport(resource, token, body)(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// wantRefusedSQL checks that err is snip_jobs_fence's refusal, naming what
// Fence.Do's *StaleTokenError names, in the same words.
func wantRefusedSQL(t testing.TB, err error, want fencing.StaleTokenError) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != staleTokenCode {
		t.Fatalf("error %v, want SQLSTATE %s", err, staleTokenCode)
	}
	if pe.Message != want.Error() {
		t.Errorf("message %q, want Go's %q", pe.Message, want.Error())
	}
	if pe.Hint == "" {
		t.Errorf("the refusal has no hint")
	}
}

func TestAProgramBehindANewerGoWriterIsRefusedAndKeepsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	const res = "export:nightly"
	if err := fencing.New(d.pool("a"), "node-a").Do(ctx, res, 5, insertReport(res, 5, "by Go, 5")); err != nil {
		t.Fatal(err)
	}

	prog := d.program("export", "node-b")
	tx, err := prog.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A write before the fence call too: the refusal takes the whole
	// transaction with it.
	if err := insertReport(res, 4, "by SQL, 4, before the fence")(ctx, tx); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT snip_jobs_fence($1, $2, $3)", res, 4, "node-b")
	wantRefusedSQL(t, err, fencing.StaleTokenError{Resource: res, Token: 4, Current: 5, Holder: "node-a"})
	if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Errorf("COMMIT after the refusal: %v, want a rollback", err)
	}
	d.wantToken(res, 5, "node-a")
	d.wantReports(res, "by Go, 5")
}

func TestAGoWriterBehindANewerProgramIsRefusedNamingTheProgram(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	const res = "export:nightly"
	if err := d.program("export", "server-2/export.sh").write(ctx, res, 7, "by SQL, 7"); err != nil {
		t.Fatal(err)
	}
	d.wantToken(res, 7, "server-2/export.sh")

	err := fencing.New(d.pool("a"), "node-a").Do(ctx, res, 6, mustNotRun(t))
	wantStale(t, err, fencing.StaleTokenError{Resource: res, Token: 6, Current: 7, Holder: "server-2/export.sh"})
	d.wantReports(res, "by SQL, 7")
}

// fencedWriter is one side of TestGoAndSQLWritersFollowOneRule: a Go writer
// (Fence.Do) or a program's (snip_jobs_fence).
type fencedWriter struct {
	kind string // "Go" or "SQL"
	// hold starts a write that holds the resource's row (its insert done)
	// until commit is called, and returns its backend.
	hold func(t *testing.T, app, resource string, token int64) (pid int32, commit func() error)
	// write runs a whole write, to its end.
	write func(t *testing.T, app, resource string, token int64) <-chan error
	// wantRefused checks the writer's refusal.
	wantRefused func(t testing.TB, err error, want fencing.StaleTokenError)
}

func writers(d *db) []fencedWriter {
	goWriter := fencedWriter{
		kind: "Go",
		hold: func(t *testing.T, app, resource string, token int64) (int32, func() error) {
			h := startHoldingWrite(t, fencing.New(d.pool(app), app), resource, token, fmt.Sprintf("Go %d", token))
			return h.pid, func() error { h.let(); return <-h.done }
		},
		write: func(t *testing.T, app, resource string, token int64) <-chan error {
			return goDo(fencing.New(d.pool(app), app), resource, token, insertReport(resource, token, fmt.Sprintf("Go %d", token)))
		},
		wantRefused: wantStale,
	}
	sqlWriter := fencedWriter{
		kind: "SQL",
		hold: func(t *testing.T, app, resource string, token int64) (int32, func() error) {
			ctx := context.Background()
			p := d.program(app, app)
			tx, err := p.fence(ctx, resource, token)
			if err != nil {
				t.Fatalf("SQL %d: %v", token, err)
			}
			if err := insertReport(resource, token, fmt.Sprintf("SQL %d", token))(ctx, tx); err != nil {
				t.Fatal(err)
			}
			return p.pid, func() error { return tx.Commit(ctx) }
		},
		write: func(t *testing.T, app, resource string, token int64) <-chan error {
			p := d.program(app, app)
			done := make(chan error, 1)
			go func() { done <- p.write(context.Background(), resource, token, fmt.Sprintf("SQL %d", token)) }()
			return done
		},
		wantRefused: wantRefusedSQL,
	}
	return []fencedWriter{goWriter, sqlWriter}
}

// One rule written twice: Fence.Do's statement and snip_jobs_fence. For
// every pair of writers, Go or SQL, one holds the resource's row with token
// 5 while the other waits for it with a lower, the same or a higher token;
// once the holder commits, the waiter is checked against what it committed:
// refused (each in its own way, naming the holder) when lower, written
// otherwise, whichever language either side speaks.
func TestGoAndSQLWritersFollowOneRule(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	for _, holder := range writers(d) {
		for _, waiter := range writers(d) {
			for _, token := range []int64{4, 5, 6} {
				name := fmt.Sprintf("%s holds 5, %s waits with %d", holder.kind, waiter.kind, token)
				t.Run(name, func(t *testing.T) {
					res := "r:" + name
					holderApp, waiterApp := "holder-"+holder.kind, "waiter-"+waiter.kind
					pid, commit := holder.hold(t, holderApp, res, 5)
					waiting := waiter.write(t, waiterApp, res, token)
					d.waitBlocked(waiterApp, pid)
					wantPending(t, waiting, "the waiter")
					if err := commit(); err != nil {
						t.Fatalf("the holder's commit: %v", err)
					}
					err := <-waiting
					if token < 5 {
						waiter.wantRefused(t, err, fencing.StaleTokenError{Resource: res, Token: token, Current: 5, Holder: holderApp})
						d.wantToken(res, 5, holderApp)
						d.wantReports(res, holder.kind+" 5")
						return
					}
					if err != nil {
						t.Fatalf("the waiter with %d: %v", token, err)
					}
					d.wantToken(res, token, waiterApp)
					d.wantReports(res, holder.kind+" 5", fmt.Sprintf("%s %d", waiter.kind, token))
				})
			}
		}
	}
}

// A newer Go writer kept waiting by a program's open transaction with an
// older token (a script cut off, or stopped, with the row held) ends that
// transaction after the break delay, as it ends an older Go writer's: the
// program's call named its token in its application_name as Go does.
func TestANewerGoWriterEndsAStaleProgramsTransaction(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	const res = "export:nightly"
	var mu sync.Mutex
	var broken []fencing.StaleHolder
	var reports notify.Notifier
	next := fencing.New(d.pool("writer-6"), "node-b", fencing.WithStaleHolderBreak(100*time.Millisecond, func(h fencing.StaleHolder) {
		mu.Lock()
		broken = append(broken, h)
		mu.Unlock()
		reports.Notify()
	}))
	ctx := context.Background()
	prog := d.program("export", "node-a")
	tx, err := prog.fence(ctx, res, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := insertReport(res, 5, "by SQL, 5")(ctx, tx); err != nil {
		t.Fatal(err)
	} // and then says nothing

	if err := <-goDo(next, res, 6, insertReport(res, 6, "by Go, 6")); err != nil {
		t.Fatalf("token 6 behind a stale program: %v", err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the stale program's transaction committed after it was ended")
	}
	d.wantToken(res, 6, "node-b")
	d.wantReports(res, "by Go, 6")
	benchtest.WaitChange(t, "the break reported", reports.Wait, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(broken) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(broken) != 1 || broken[0] != (fencing.StaleHolder{Resource: res, Token: 6, HolderToken: 5, HolderPID: prog.pid}) {
		t.Fatalf("holders ended: %+v; want token 5's backend %d, once", broken, prog.pid)
	}
}

// The call names the transaction's token in application_name and, when
// asked, sets the idle timeout, both for the transaction only; a program
// that then says nothing while it holds the row is ended by PostgreSQL after
// that timeout, and the next term's writer proceeds.
func TestTheSQLFenceNamesItsTokenAndBoundsItsIdleTimeForTheTransactionOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	prog := d.program("export.sh", "node-a")
	settings := func(q fencing.Querier) string {
		var s string
		if err := q.QueryRow(ctx, `SELECT current_setting('application_name') || ' | ' ||
			current_setting('idle_in_transaction_session_timeout')`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := settings(prog.conn)
	fenceWithIdle := func(resource string, token int64, idle string) pgx.Tx {
		tx, err := prog.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT snip_jobs_fence($1, $2, $3, $4::interval)", resource, token, "node-a", idle); err != nil {
			t.Fatal(err)
		}
		return tx
	}

	tx := fenceWithIdle("export:other", 5, "1 hour")
	if got, want := settings(tx), "export.sh fence-token=5 | 1h"; got != want {
		t.Errorf("in the fenced transaction: %q, want %q", got, want)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := settings(prog.conn); got != before {
		t.Errorf("after the fenced transaction: %q, want the session's own %q", got, before)
	}

	const res = "export:nightly"
	tx = fenceWithIdle(res, 5, "300 milliseconds") // holds the row, then says nothing
	if err := <-goDo(fencing.New(d.pool("writer-6"), "node-b"), res, 6, insertReport(res, 6, "by Go, 6")); err != nil {
		t.Fatalf("token 6 behind a silent program: %v", err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the silent program's transaction committed after PostgreSQL ended it")
	}
	d.wantToken(res, 6, "node-b")
	d.wantReports(res, "by Go, 6")
}

// Arguments that make no sense are refused (invalid_parameter_value), and so
// is a call in autocommit as PostgreSQL's simple protocol sends it
// (no_active_sql_transaction), where the row would be released as soon as
// the call returned. Nothing is written to fencing_tokens.
func TestTheSQLFenceRefusesArgumentsThatMakeNoSense(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	prog := d.program("export", "node-a")
	for _, tc := range []struct {
		name string
		args []any
		code string
	}{
		{"empty resource", []any{"", 1, "node-a"}, "22023"},
		{"NULL resource", []any{nil, 1, "node-a"}, "22023"},
		{"resource of 1001 characters", []any{strings.Repeat("r", 1001), 1, "node-a"}, "22023"},
		{"zero token", []any{"r", 0, "node-a"}, "22023"},
		{"negative token", []any{"r", -1, "node-a"}, "22023"},
		{"NULL token", []any{"r", nil, "node-a"}, "22023"},
		{"empty holder", []any{"r", 1, ""}, "22023"},
		{"NULL holder", []any{"r", 1, nil}, "22023"},
		{"holder of 201 characters", []any{"r", 1, strings.Repeat("h", 201)}, "22023"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := prog.conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, "SELECT snip_jobs_fence($1::text, $2::bigint, $3::text)", tc.args...)
			wantCode(t, err, tc.code)
		})
	}
	t.Run("idle timeout not positive", func(t *testing.T) {
		for _, idle := range []string{"0", "-1 second"} {
			tx, err := prog.conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tx.Exec(ctx, "SELECT snip_jobs_fence('r', 1, 'node-a', $1::interval)", idle)
			wantCode(t, err, "22023")
			_ = tx.Rollback(ctx)
		}
	})
	t.Run("autocommit", func(t *testing.T) {
		_, err := prog.conn.Exec(ctx, "SELECT snip_jobs_fence('r', 1, 'node-a')", pgx.QueryExecModeSimpleProtocol)
		wantCode(t, err, "25P01")
		// One message holding a whole transaction is refused too, although
		// it would have been safe: the function cannot tell it from
		// autocommit (docs/operations.md says to BEGIN on its own).
		_, err = prog.conn.Exec(ctx, "BEGIN; SELECT snip_jobs_fence('r', 1, 'node-a'); COMMIT", pgx.QueryExecModeSimpleProtocol)
		wantCode(t, err, "25P01")
		if _, err := prog.conn.Exec(ctx, "ROLLBACK"); err != nil { // the block that BEGIN opened
			t.Fatal(err)
		}
	})
	var n int
	if err := d.obs.QueryRow(ctx, "SELECT count(*) FROM fencing_tokens").Scan(&n); err != nil || n != 0 {
		t.Errorf("fencing_tokens has %d rows (%v), want none", n, err)
	}

	// What the function cannot see, as docs/operations.md says: an
	// autocommit call over the extended protocol (a driver's parameterised
	// statement) began its transaction with its Parse message, before the
	// Execute whose time statement_timestamp() gives. It goes through, and
	// fences nothing after it.
	if _, err := prog.conn.Exec(ctx, "SELECT snip_jobs_fence($1, $2, $3)", "r", 1, "node-a"); err != nil {
		t.Errorf("an autocommit call over the extended protocol: %v; the docs say it is not caught", err)
	}
}

func wantCode(t testing.TB, err error, code string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code {
		t.Errorf("error %v, want SQLSTATE %s", err, code)
	}
}
