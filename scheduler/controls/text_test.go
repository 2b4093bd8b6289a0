package controls_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// What operators write is capped in characters, by the commands' check and
// by the database whoever writes: a reason at MaxReason (500), who asks at
// MaxBy (200). At the cap it is stored whole, multi-byte characters
// counting one; one more is refused by the database with a
// *TextTooLongError saying the cap, and nothing is stored (a 131 KB reason
// used to be stored, then shown on every status page at every refresh).
func TestTheDatabaseRefusesAReasonOrANameLongerThanItsCap(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	pool := dbtest.Pool(t, db.Runtime)
	ctx := context.Background()
	chars := func(n int) string { return strings.Repeat("é", n) }

	if p, _, err := controls.PauseJob(ctx, pool, "report", chars(controls.MaxBy), chars(controls.MaxReason)); err != nil || p.Reason != chars(500) || p.By != chars(200) {
		t.Fatalf("a pause at the caps: %d and %d characters stored, %v; want it whole", len([]rune(p.By)), len([]rune(p.Reason)), err)
	}
	if _, _, err := controls.DrainInstance(ctx, pool, "server-1", "alice@web1", chars(controls.MaxReason)); err != nil {
		t.Fatalf("a drain at the cap: %v", err)
	}
	refused := []struct {
		what string
		do   func() error
		want string
	}{
		{"pause --reason", func() error {
			_, _, err := controls.PauseJob(ctx, pool, "aggregator", "alice@web1", chars(controls.MaxReason+1))
			return err
		}, "pause aggregator: the reason (--reason) is longer than 500 characters, the most the database accepts"},
		{"drain --reason", func() error {
			_, _, err := controls.DrainInstance(ctx, pool, "server-2", "alice@web1", chars(10<<20/2))
			return err
		}, "drain server-2: the reason (--reason) is longer than 500 characters, the most the database accepts"},
		{"drain --by", func() error {
			_, _, err := controls.DrainInstance(ctx, pool, "server-3", chars(controls.MaxBy+1), "")
			return err
		}, "drain server-3: who asks (--by) is longer than 200 characters, the most the database accepts"},
		{"run --by", func() error {
			spec := configs.Job{Name: "aggregator", Type: "sql", Singleton: true, Schedule: configs.Schedule{Kind: configs.Interval}}
			_, _, err := controls.RequestRun(ctx, pool, spec, chars(controls.MaxBy+1))
			return err
		}, "run aggregator: who asks (--by) is longer than 200 characters, the most the database accepts"},
	}
	for _, c := range refused {
		err := c.do()
		var long *controls.TextTooLongError
		if !errors.As(err, &long) || err.Error() != c.want {
			t.Errorf("%s: %v; want a *TextTooLongError %q", c.what, err, c.want)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM job_pauses) + (SELECT count(*) FROM instance_drains) + (SELECT count(*) FROM manual_runs)`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d rows stored, %v; want the 2 at the caps", n, err)
	}
	if err := controls.CheckText(chars(200), chars(500)); err != nil {
		t.Errorf("CheckText at the caps: %v", err)
	}
}
