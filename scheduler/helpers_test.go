package scheduler_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

func TestMain(m *testing.M) {
	benchtest.MostlyWaiting(12) // instances waiting for leases, slots and commits: 21 → 13 s alone at 8, same CPU
	os.Exit(benchtest.RunMain(m))
}

// newCluster is a jobtest cluster on etcd with the table test jobs write to,
// which the instances' runtime role may insert into, as an operator grants
// for a job's own table.
func newCluster(t *testing.T) *jobtest.Cluster {
	t.Helper()
	return newClusterOn(t, jobtest.Etcd)
}

// newClusterOn is newCluster on backend b.
func newClusterOn(t *testing.T, b jobtest.Backend) *jobtest.Cluster {
	t.Helper()
	c := jobtest.NewClusterOn(t, b)
	if _, err := c.DB.Exec(context.Background(), `CREATE TABLE test_events (
		id bigserial PRIMARY KEY, job text NOT NULL, instance text NOT NULL, token bigint NOT NULL,
		slot timestamptz, at timestamptz NOT NULL DEFAULT clock_timestamp());
		GRANT INSERT ON test_events TO `+dbtest.RuntimeRole+`;
		GRANT USAGE ON SEQUENCE test_events_id_seq TO `+dbtest.RuntimeRole); err != nil {
		t.Fatal(err)
	}
	return c
}

// recordType is a job type whose every run writes one fenced row to
// test_events (a continuous run writes one every 20 ms until its context ends).
// completeSlot makes a cron run complete its slot in the same transaction.
func recordType(name string, completeSlot bool) scheduler.Type {
	return scheduler.Type{Name: name, New: func(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
		write := func(ctx context.Context, r *scheduler.Run) error {
			if r.Token == 0 { // not a singleton: nothing to fence by
				_, err := env.Pool.Exec(ctx, `INSERT INTO test_events (job, instance, token) VALUES ($1, $2, 0)`, r.Job, r.Instance)
				return err
			}
			return r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
				var slot *time.Time
				if !r.Slot.IsZero() {
					slot = &r.Slot
				}
				if _, err := tx.Exec(ctx, `INSERT INTO test_events (job, instance, token, slot) VALUES ($1, $2, $3, $4)`,
					r.Job, r.Instance, r.Token, slot); err != nil {
					return err
				}
				if completeSlot && slot != nil {
					return r.CompleteSlot(ctx, tx)
				}
				return nil
			})
		}
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			if spec.Schedule.Kind != configs.Continuous {
				return write(ctx, r)
			}
			for {
				if err := write(ctx, r); err != nil {
					return err
				}
				r.Progress()
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(20 * time.Millisecond):
				}
			}
		}), nil
	}}
}

// event is a row of test_events.
type event struct {
	ID       int64
	Instance string
	Token    int64
	Slot     *time.Time
}

func events(t *testing.T, c *jobtest.Cluster, job string) []event {
	t.Helper()
	rows, err := c.DB.Query(context.Background(), `SELECT id, instance, token, slot FROM test_events WHERE job = $1 ORDER BY id`, job)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[event])
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// checkOneWriterAtATime: in commit order, tokens never go down, and each token
// belongs to one instance.
func checkOneWriterAtATime(t *testing.T, c *jobtest.Cluster, job string) []event {
	t.Helper()
	evs := events(t, c, job)
	owner := map[int64]string{}
	for i, e := range evs {
		if i > 0 && e.Token < evs[i-1].Token {
			t.Errorf("%s: row %d written with token %d after token %d had written", job, e.ID, e.Token, evs[i-1].Token)
		}
		if o, ok := owner[e.Token]; ok && o != e.Instance {
			t.Errorf("%s: token %d used by %s and %s", job, e.Token, o, e.Instance)
		}
		owner[e.Token] = e.Instance
	}
	return evs
}
