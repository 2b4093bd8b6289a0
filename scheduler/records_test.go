package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
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

	url := dbtest.URL(t)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close(ctx) })
	runIDs := func() int64 { return benchtest.Value[int64](t, other, `SELECT nextval('job_runs_id_seq')`) }
	before := runIDs()
	n, conn := prepared(url)
	if n != 5 {
		t.Fatalf("%d statements prepared, want the 5 of job_terms, job_runs and fence_rejections", n)
	}
	// It called the record functions, and left nothing: no term, no run, no run id taken.
	if terms, runs := benchtest.Value[int64](t, conn, `SELECT count(*) FROM job_terms`),
		benchtest.Value[int64](t, conn, `SELECT count(*) FROM job_runs`); terms != 0 || runs != 0 {
		t.Errorf("after WarmRecords: %d terms and %d runs recorded, want none", terms, runs)
	}
	if after := runIDs(); after != before+1 {
		t.Errorf("the run ids went from %d to %d across WarmRecords: it took %d", before, after, after-before-1)
	}
	// A plain Exec of a record statement's text runs the prepared statement.
	const rejection = `INSERT INTO fence_rejections (resource, token, current, instance) VALUES ($1, $2, $3, $4)`
	if _, err := conn.Exec(ctx, rejection, "warm", 1, 2, "server-1"); err != nil {
		t.Fatal(err)
	}
	var plans int64
	if err := conn.QueryRow(ctx, `SELECT generic_plans + custom_plans FROM pg_prepared_statements
		WHERE name LIKE 'stmt\_%' AND statement = $1`, rejection).Scan(&plans); err != nil || plans != 1 {
		t.Fatalf("the prepared refusal statement ran %d times (%v), want 1", plans, err)
	}
}

// A leader's run that outlives its term — frozen, or deaf to its context —
// is recorded cut off when it returns, never ok, with the reason its term
// ended; the successor's records start after it was closed, so no two ok
// runs of the singleton overlap in job_runs. On both backends.
func TestARunThatOutlivesItsTermIsRecordedCutOffNeverOK(t *testing.T) {
	t.Parallel()
	jobtest.EachBackend(t, func(t *testing.T, b jobtest.Backend) {
		c := newClusterOn(t, b)
		release := make(chan struct{})
		stuck := make(chan *scheduler.Run, 1)
		reg := jobtest.Registry(t, scheduler.Type{Name: "deaf", New: func(scheduler.Env, configs.Job) (scheduler.Job, error) {
			return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
				select {
				case stuck <- r: // the first run: it ignores its context until released
					<-release
				default:
					<-ctx.Done()
				}
				return nil
			}), nil
		}})
		jobs := []configs.Job{jobtest.Continuous("deaf", "deaf")}
		for _, name := range []string{"server-1", "server-2"} {
			c.Start(name, reg, jobs)
		}
		first := <-stuck
		c.Revoke(first.Instance) // its term ends (lease lost); its run goes on
		var second status.TermRecord
		c.WaitCommit("the successor's term to be recorded", []string{"job_terms"}, func() bool {
			terms, _, err := status.History(context.Background(), c.DB, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range terms {
				if tr.Token > first.Token && tr.Job == "deaf" {
					second = tr
					return true
				}
			}
			return false
		})
		close(release)
		var runs []status.RunRecord
		c.WaitCommit("the first run's end to be recorded by its own instance", []string{"job_runs"}, func() bool {
			var err error
			if runs, _, err = status.Runs(context.Background(), c.DB, "deaf", 10); err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				// Its own record says why its term ended, as the instance
				// saw it: the lease lost, or its key gone with it.
				if r.Token == first.Token && strings.Contains(r.Error, "its term ended while it ran: ") && strings.Contains(r.Error, "-lost") {
					return true
				}
			}
			return false
		})
		for _, r := range runs {
			if r.Token == first.Token && (r.Result != "cut off" || r.Finished.After(second.Started)) {
				t.Errorf("the run of token %d that outlived its term: %+v; want cut off, finished no later than token %d began (%v)",
					first.Token, r, second.Token, second.Started)
			}
		}
		checkNoOKRunsOverlap(t, runs)
	})
}

// checkNoOKRunsOverlap: a singleton's runs recorded ok never overlap.
func checkNoOKRunsOverlap(t *testing.T, runs []status.RunRecord) {
	t.Helper()
	for i, a := range runs {
		for _, b := range runs[i+1:] {
			if a.Result == "ok" && b.Result == "ok" && a.Started.Before(b.Finished) && b.Started.Before(a.Finished) {
				t.Errorf("ok runs %d (token %d) and %d (token %d) overlap", a.ID, a.Token, b.ID, b.Token)
			}
		}
	}
}
