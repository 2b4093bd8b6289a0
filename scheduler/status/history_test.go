package status_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }

// A handed-over term records its end after resigning, so that record may land
// after its successor's start: History ends it at that start. A term that
// ended otherwise keeps a late end (its instance was paused or cut off and
// noticed late), and a term never closed stays open.
func TestHistoryEndsAHandedOverTermNoLaterThanItsSuccessorStarted(t *testing.T) {
	ctx := context.Background()
	_, pool := dbtest.New(t)
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
	terms, _, err := status.History(ctx, pool, t0)
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
