package benchtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) {
	MostlyWaiting(4) // clusters starting, members electing
	os.Exit(RunMain(m))
}

func pgConnect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func pgExec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func pgCount(t testing.TB, conn *pgx.Conn, sql string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

const pgUserTables = `SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')`

func TestPostgresDBIsolated(t *testing.T) {
	t.Parallel()
	url1, url2 := PostgresDB(t), PostgresDB(t)
	if url1 == url2 {
		t.Fatalf("two PostgresDB calls returned the same database %s", url1)
	}
	db1, db2 := pgConnect(t, url1), pgConnect(t, url2)
	for _, db := range []*pgx.Conn{db1, db2} {
		if n := pgCount(t, db, pgUserTables); n != 0 {
			t.Fatalf("new database %s has %d tables", db.Config().Database, n)
		}
	}

	pgExec(t, db1, `CREATE TABLE jobs (id int PRIMARY KEY, name text NOT NULL)`)
	pgExec(t, db1, `INSERT INTO jobs VALUES (1, 'one'), (2, 'two')`)
	if n := pgCount(t, db2, pgUserTables); n != 0 {
		t.Fatalf("database 2 sees %d tables after database 1 created one", n)
	}
	pgExec(t, db2, `CREATE TABLE jobs (id int PRIMARY KEY, name text NOT NULL)`)
	pgExec(t, db2, `INSERT INTO jobs VALUES (1, 'uno')`)

	if n := pgCount(t, db1, `SELECT count(*) FROM jobs`); n != 2 {
		t.Errorf("database 1 has %d jobs, want 2", n)
	}
	if n := pgCount(t, db2, `SELECT count(*) FROM jobs`); n != 1 {
		t.Errorf("database 2 has %d jobs, want 1", n)
	}
}

func TestStartPostgresRestart(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t)
	url := p.CreateDatabase(t)
	ctx := context.Background()

	db := pgConnect(t, url)
	pgExec(t, db, `CREATE TABLE jobs (id int PRIMARY KEY)`)
	pgExec(t, db, `INSERT INTO jobs SELECT generate_series(1, 100)`)
	db.Close(ctx)

	p.Restart(t)
	db = pgConnect(t, url)
	if n := pgCount(t, db, `SELECT count(*) FROM jobs`); n != 100 {
		t.Fatalf("after Restart: %d jobs, want 100", n)
	}
	pgExec(t, db, `INSERT INTO jobs VALUES (101)`)

	p.Stop(t)
	if _, err := db.Exec(ctx, `SELECT 1`); err == nil {
		t.Fatal("query on a connection opened before Stop succeeded while stopped")
	}
	connectCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(connectCtx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("connect succeeded while stopped")
	}

	p.Start(t)
	db = pgConnect(t, url)
	if n := pgCount(t, db, `SELECT count(*) FROM jobs`); n != 101 {
		t.Fatalf("after Stop and Start: %d jobs, want 101", n)
	}
}

func BenchmarkStartPostgres(b *testing.B) {
	for b.Loop() {
		StartPostgres(b)
	}
}

func BenchmarkPostgresDB(b *testing.B) {
	for b.Loop() {
		PostgresDB(b)
	}
}
