package aggregator

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/testbench/dbtest"
)

// The look for work runs every interval while the job is idle, with the
// table holding every event of the retention: it must find its answer at the
// ends of the primary key, never by reading click_events (an EXISTS on
// `txid >= x` read the whole table, 0.6 s for 2 M events, to find nothing).
func TestTheLookForWorkNeverScansTheEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range []string{
		`INSERT INTO links (id, slug) VALUES (1, 'a')`,
		`DO $$ BEGIN FOR i IN 1..50 LOOP
			INSERT INTO click_events (link_id, country) SELECT 1, 'FR' FROM generate_series(1, 1000);
			COMMIT;
		END LOOP; END $$`,
		// Caught up, with every event kept (a retention), and some not pruned.
		`UPDATE click_aggregator_state SET prev = pg_current_snapshot(), unpruned = 50000`,
		`ANALYZE click_events`,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	for _, args := range [][]any{{int64(0), false}, {int64(3_600_000_000), false}, {int64(0), true}} {
		rows, err := conn.Query(ctx, "EXPLAIN "+pendingSQL, args...)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range plan {
			if strings.Contains(line, "Seq Scan on click_events") {
				t.Fatalf("retention %v µs, pruning %v: the look for work reads click_events:\n%s", args[0], args[1], strings.Join(plan, "\n"))
			}
		}
		var w work
		if err := conn.QueryRow(ctx, pendingSQL, args...).Scan(&w.fold, &w.advance, &w.prune, &w.horizon); err != nil {
			t.Fatal(err)
		}
		if w.fold {
			t.Errorf("retention %v µs, pruning %v: found events to fold after every one was processed", args[0], args[1])
		}
	}
}
