package scheduler_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// WarmRecords prepares the scheduler's record statements on a connection to a
// migrated database; on one whose tables do not exist yet it prepares none and
// still leaves the connection usable.
func TestWarmRecordsPreparesTheRecordStatementsAndNeverFailsAConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prepared := func(url string) (int, *pgx.Conn) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		if err := scheduler.WarmRecords(ctx, conn); err != nil {
			t.Fatalf("WarmRecords: %v", err)
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'stmt\_%'`).Scan(&n); err != nil {
			t.Fatalf("the connection is unusable after WarmRecords: %v", err)
		}
		return n, conn
	}

	if n, _ := prepared(benchtest.PostgresDB(t)); n != 0 {
		t.Errorf("%d statements prepared on a database without the tables, want 0", n)
	}

	n, conn := prepared(dbtest.URL(t))
	if n != 5 {
		t.Fatalf("%d statements prepared, want the 5 of job_terms, job_runs and fence_rejections", n)
	}
	// A plain Exec of a record statement's text runs the prepared statement.
	const termStart = `INSERT INTO job_terms (job, token, instance) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
	if _, err := conn.Exec(ctx, termStart, "warm", 1, "server-1"); err != nil {
		t.Fatal(err)
	}
	var plans int64
	if err := conn.QueryRow(ctx, `SELECT generic_plans + custom_plans FROM pg_prepared_statements
		WHERE name LIKE 'stmt\_%' AND statement = $1`, termStart).Scan(&plans); err != nil || plans != 1 {
		t.Fatalf("the prepared term-start statement ran %d times (%v), want 1", plans, err)
	}
}
