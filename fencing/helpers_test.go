package fencing_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// patience bounds waits for things that must happen; it only decides how long
// a broken build takes to fail, never whether a healthy one passes.
const patience = 60 * time.Second

// db is one test's database: the real schema (migrations.Up) plus a table
// "reports" that stands for a job's data.
type db struct {
	t   testing.TB
	url string
	obs *pgxpool.Pool // for the test's own reads
}

func newDB(t testing.TB) *db {
	t.Helper()
	ctx := context.Background()
	d := &db{t: t, url: dbtest.URL(t)}
	d.obs = d.pool("observer")
	if _, err := d.obs.Exec(ctx, `CREATE TABLE reports (
		id       bigserial PRIMARY KEY,
		resource text   NOT NULL,
		token    bigint NOT NULL,
		body     text   NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return d
}

// setDefaultIsolation sets the database's default transaction isolation
// level for sessions that start afterwards.
func (d *db) setDefaultIsolation(level string) {
	d.t.Helper()
	ctx := context.Background()
	var name string
	if err := d.obs.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		d.t.Fatal(err)
	}
	if _, err := d.obs.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+
		" SET default_transaction_isolation = "+pgx.Identifier{level}.Sanitize()); err != nil {
		d.t.Fatal(err)
	}
}

// pool returns a new pool whose connections carry application_name app, so
// the test can find them in pg_stat_activity.
func (d *db) pool(app string) *pgxpool.Pool {
	d.t.Helper()
	return d.poolOf(app, 0)
}

// poolOf is pool with at most maxConns connections (0: pgxpool's default).
func (d *db) poolOf(app string, maxConns int32) *pgxpool.Pool {
	d.t.Helper()
	return d.poolWith(d.poolConfig(app, maxConns))
}

// poolConfig is the configuration of poolOf, to change before poolWith.
func (d *db) poolConfig(app string, maxConns int32) *pgxpool.Config {
	d.t.Helper()
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		d.t.Fatal(err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	return cfg
}

// poolWith returns a new pool with cfg, closed when the test ends.
func (d *db) poolWith(cfg *pgxpool.Config) *pgxpool.Pool {
	d.t.Helper()
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(p.Close)
	return p
}

// insertReport is a job's write: one row of data, inside the fenced
// transaction.
func insertReport(resource string, token int64, body string) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO reports (resource, token, body) VALUES ($1, $2, $3)", resource, token, body)
		return err
	}
}

// reports returns the bodies written to resource, in insertion order.
func (d *db) reports(resource string) []string {
	d.t.Helper()
	rows, err := d.obs.Query(context.Background(), "SELECT body FROM reports WHERE resource = $1 ORDER BY id", resource)
	if err != nil {
		d.t.Fatal(err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		d.t.Fatal(err)
	}
	return bodies
}

// wantToken checks the stored token and holder of resource.
func (d *db) wantToken(resource string, token int64, holder string) {
	d.t.Helper()
	got, gotHolder, err := fencing.Current(context.Background(), d.obs, resource)
	if err != nil {
		d.t.Fatalf("Current(%q): %v", resource, err)
	}
	if got != token || gotHolder != holder {
		d.t.Errorf("%q: stored token %d holder %q, want %d %q", resource, got, gotHolder, token, holder)
	}
}

func (d *db) wantReports(resource string, want ...string) {
	d.t.Helper()
	if got := d.reports(resource); !slices.Equal(got, want) {
		d.t.Errorf("%q: reports %q, want %q", resource, got, want)
	}
}

// waitBlocked waits until the backend of application app waits for a lock
// held by backend holder, and returns its pid.
func (d *db) waitBlocked(app string, holder int32) int32 {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for {
		var pid int32
		err := d.obs.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE split_part(application_name, ' fence-token=', 1) = $1 AND wait_event_type = 'Lock' AND $2 = ANY (pg_blocking_pids(pid))`,
			app, holder).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			d.t.Fatalf("waiting for %s to block on backend %d: %v", app, holder, err)
		}
		select {
		case <-ctx.Done():
			d.t.Fatalf("%s never blocked on backend %d within %v", app, holder, patience)
		case <-time.After(time.Millisecond):
		}
	}
}

// holdingWrite is a fenced write whose function has run its insert and now
// waits for release, holding the resource's row.
type holdingWrite struct {
	pid     int32 // its backend
	release chan struct{}
	once    sync.Once
	done    chan error // Do's result
}

// let lets the write's function return (at the latest when the test ends, so
// that a failed test does not leave it holding the row).
func (h *holdingWrite) let() { h.once.Do(func() { close(h.release) }) }

// startHoldingWrite starts a fenced write and returns once its function runs.
func startHoldingWrite(t testing.TB, f *fencing.Fence, resource string, token int64, body string) *holdingWrite {
	t.Helper()
	h := &holdingWrite{release: make(chan struct{}), done: make(chan error, 1)}
	t.Cleanup(h.let)
	entered := make(chan int32, 1)
	go func() {
		h.done <- f.Do(context.Background(), resource, token, func(ctx context.Context, tx pgx.Tx) error {
			var pid int32
			if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return err
			}
			if err := insertReport(resource, token, body)(ctx, tx); err != nil {
				return err
			}
			entered <- pid
			<-h.release
			return nil
		})
	}()
	select {
	case h.pid = <-entered:
	case err := <-h.done:
		t.Fatalf("write with token %d ended before its function ran: %v", token, err)
	}
	return h
}

// goDo runs f.Do in a goroutine and returns the channel of its result.
func goDo(f *fencing.Fence, resource string, token int64, fn func(context.Context, pgx.Tx) error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f.Do(context.Background(), resource, token, fn) }()
	return done
}

func wantPending(t testing.TB, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while it should still wait", what, err)
	default:
	}
}

// wantStale checks that err is a *StaleTokenError with these fields.
func wantStale(t testing.TB, err error, want fencing.StaleTokenError) {
	t.Helper()
	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) {
		t.Fatalf("error %v (%T), want *fencing.StaleTokenError", err, err)
	}
	if *stale != want {
		t.Errorf("StaleTokenError %+v, want %+v", *stale, want)
	}
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Errorf("errors.Is(%v, ErrStaleToken) = false", err)
	}
}

// mustNotRun is a fenced function that records being called.
func mustNotRun(t testing.TB) func(context.Context, pgx.Tx) error {
	return func(context.Context, pgx.Tx) error {
		t.Errorf("fn was called")
		return nil
	}
}
