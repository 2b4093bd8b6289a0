package dbtest_test

import (
	"os"
	"testing"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }

// schemaSQL describes a database's public schema as one text: every relation
// with its kind, owner and privileges, every column, function and trigger, the
// schema's own privileges and the applied migrations.
const schemaSQL = `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
	SELECT format('relation %s kind %s owner %s acl %s', c.relname, c.relkind, pg_get_userbyid(c.relowner), c.relacl)
	  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
	UNION ALL
	SELECT format('column %s.%s %s %s %s', table_name, column_name, data_type, is_nullable, column_default)
	  FROM information_schema.columns WHERE table_schema = 'public'
	UNION ALL
	SELECT format('function %s owner %s acl %s', p.oid::regprocedure, pg_get_userbyid(p.proowner), p.proacl)
	  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
	UNION ALL
	SELECT format('trigger %s on %s: %s', tgname, tgrelid::regclass, pg_get_triggerdef(oid)) FROM pg_trigger WHERE NOT tgisinternal
	UNION ALL
	SELECT format('schema public owner %s acl %s', pg_get_userbyid(nspowner), nspacl) FROM pg_namespace WHERE nspname = 'public'
	UNION ALL
	SELECT format('migration %s applied %s', version_id, is_applied) FROM goose_db_version
) s(x)`

func schema(t *testing.T, url string) string {
	t.Helper()
	return benchtest.Value[string](t, dbtest.Pool(t, url), schemaSQL)
}

// A copy of the template is what the steps of docs/operations.md give.
func TestNewDBIsSetupStepByStep(t *testing.T) {
	copied := dbtest.NewDB(t)
	stepwise := dbtest.Setup(t, benchtest.PostgresDB(t))
	got, want := schema(t, copied.Super), schema(t, stepwise.Super)
	if got != want {
		t.Fatalf("NewDB's schema differs from Setup's:\n--- NewDB\n%s\n--- Setup\n%s", got, want)
	}
	if n := benchtest.Value[int](t, dbtest.Pool(t, copied.Super), `SELECT count(*) FROM goose_db_version WHERE version_id > 0`); n == 0 {
		t.Fatal("NewDB's database has no migration applied")
	}
}

// A copy of the superuser's template is what migrating by hand gives.
func TestURLIsMigrate(t *testing.T) {
	got, want := schema(t, dbtest.URL(t)), schema(t, dbtest.Migrate(t, benchtest.PostgresDB(t)))
	if got != want {
		t.Fatalf("URL's schema differs from Migrate's:\n--- URL\n%s\n--- Migrate\n%s", got, want)
	}
}

// Tests that start together each get their own database, and what one writes
// the others do not see: the template is built once and stays as it was.
func TestNewDBConcurrentAndIsolated(t *testing.T) {
	for _, name := range []string{"a", "b", "c", "d"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.NewDB(t)
			pool := dbtest.Pool(t, db.Runtime)
			if n := benchtest.Value[int](t, pool, `SELECT count(*) FROM job_runs`); n != 0 {
				t.Fatalf("a new database has %d job_runs, want 0: a copy of another test's data", n)
			}
			benchtest.Exec(t, pool, `INSERT INTO job_runs (job, instance) VALUES ($1, 'x')`, name)
		})
	}
}

// The template accepts no connections, so no test can change what later
// copies start from.
func TestTemplateRefusesConnections(t *testing.T) {
	db := dbtest.NewDB(t)
	n := benchtest.Value[int](t, dbtest.Pool(t, db.Super),
		`SELECT count(*) FROM pg_database WHERE datistemplate AND NOT datallowconn AND datname = 'tmpl_roles'`)
	if n != 1 {
		t.Fatal("tmpl_roles is not a template that refuses connections")
	}
}

// Per-database cost of a test's database: a copy of the template (NewDB)
// against the steps it replaces (PostgresDB + Setup):
//
//	go test ./testbench/dbtest -run '^$' -bench . -count 3
func BenchmarkNewDB(b *testing.B) {
	dbtest.NewDB(b) // the template, built once
	for b.Loop() {
		dbtest.NewDB(b)
	}
}

func BenchmarkSetup(b *testing.B) {
	for b.Loop() {
		dbtest.Setup(b, benchtest.PostgresDB(b))
	}
}

// WaitCommit wakes at each commit to the table and returns once cond holds;
// a rolled-back change wakes nobody and counts for nothing.
func TestWaitCommitWakesAtCommits(t *testing.T) {
	url := dbtest.URL(t)
	pool := dbtest.Pool(t, url)
	benchtest.Exec(t, pool, `CREATE TABLE pulses (n int)`)
	count := func() int { return benchtest.Value[int](t, pool, `SELECT count(*) FROM pulses`) }
	var checks int
	dbtest.WaitCommit(t, url, "the trigger in place", []string{"pulses"}, func() bool { checks++; return true })
	if checks != 1 {
		t.Fatalf("cond checked %d times when it held at once; want 1", checks)
	}
	go func() {
		ctx := t.Context()
		tx, err := pool.Begin(ctx)
		if err == nil {
			_, _ = tx.Exec(ctx, `INSERT INTO pulses VALUES (0)`)
			_ = tx.Rollback(ctx)
		}
		for i := range 3 {
			_, _ = pool.Exec(ctx, `INSERT INTO pulses VALUES ($1)`, i+1)
		}
	}()
	checks = 0
	dbtest.WaitCommit(t, url, "three pulses", []string{"pulses"}, func() bool { checks++; return count() == 3 })
	if checks > 4 {
		t.Fatalf("cond checked %d times for three commits; want at most 4 (once, then once per commit)", checks)
	}
}
