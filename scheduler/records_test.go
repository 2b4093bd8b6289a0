package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/internal/testdb"
	"github.com/snip/snip-jobs/internal/testenv"
	"github.com/snip/snip-jobs/scheduler"
)

// WarmRecords prepares the scheduler's record statements on a connection to a
// migrated database; on one whose tables do not exist yet it prepares none and
// still leaves the connection usable.
func TestWarmRecordsPreparesTheRecordStatementsAndNeverFailsAConnection(t *testing.T) {
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

	if n, _ := prepared(testenv.PostgresDB(t)); n != 0 {
		t.Errorf("%d statements prepared on a database without the tables, want 0", n)
	}

	n, conn := prepared(testdb.URL(t))
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

// A handed-over term records its end after resigning, so that record may land
// after its successor's start: History ends it at that start. A term that
// ended otherwise keeps a late end (its instance was paused or cut off and
// noticed late), and a term never closed stays open.
func TestHistoryEndsAHandedOverTermNoLaterThanItsSuccessorStarted(t *testing.T) {
	ctx := context.Background()
	_, pool := testdb.New(t)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, r := range []struct {
		token      int64
		start, end int // ms after t0; end -1: never closed
		reason     string
	}{
		{1, 0, 1030, "shutdown"},   // recorded 30 ms after token 2 started
		{2, 1000, 3500, "expired"}, // paused: noticed 500 ms after token 3 started
		{3, 3000, 5000, "resign-request"},
		{4, 5010, -1, ""}, // killed: never closed
		{5, 7000, -1, ""}, // leading now
	} {
		var end *time.Time
		var reason *string
		if r.end >= 0 {
			e := at(r.end)
			end, reason = &e, &r.reason
		}
		if _, err := pool.Exec(ctx, `INSERT INTO job_terms (job, token, instance, started_at, ended_at, reason) VALUES ('pulse', $1, 'server-1', $2, $3, $4)`,
			r.token, at(r.start), end, reason); err != nil {
			t.Fatal(err)
		}
	}
	terms, _, err := scheduler.History(ctx, pool, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]time.Time{1: at(1000), 2: at(3500), 3: at(5000), 4: {}, 5: {}}
	if len(terms) != len(want) {
		t.Fatalf("%d terms, want %d: %+v", len(terms), len(want), terms)
	}
	for _, term := range terms {
		if !term.Ended.Equal(want[term.Token]) {
			t.Errorf("term %d (%s) ends at %v, want %v", term.Token, term.Reason, term.Ended, want[term.Token])
		}
	}
}
