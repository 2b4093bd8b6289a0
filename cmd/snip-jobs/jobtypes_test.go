package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/testdb"
	"github.com/snip/snip-jobs/internal/testenv"
	"github.com/snip/snip-jobs/scheduler"
)

// The sql type: a singleton's statement is fenced by its token, a cron
// singleton's slot completes in the statement's own transaction, and a job that
// runs everywhere executes plainly.
func TestSQLJobFencesSingletonsAndCompletesCronSlotsWithTheStatement(t *testing.T) {
	ctx := context.Background()
	url, pool := testdb.New(t)
	testenv.Exec(t, pool, pulsesTable)
	file, err := configs.Parse("test.yaml", []byte(`
instance: server-a
jobs:
  - name: stamp
    type: sql
    cron: "* * * * *"
    options:
      statement: INSERT INTO pulses (instance, token) VALUES (@instance, @token)
`), registry())
	if err != nil {
		t.Fatal(err)
	}
	typ, _ := registry().Type("sql")
	job, err := typ.New(scheduler.Env{Instance: "server-a", Pool: pool}, file.Jobs[0])
	if err != nil {
		t.Fatal(err)
	}
	fence := fencing.New(pool, "server-a")
	slot := time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	testenv.Exec(t, pool, `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ('stamp', '2026-11-23T07:00:00Z', 'running', 20, 'server-a')`)
	run := func(token int64, slot time.Time) error {
		var f *fencing.Fence
		if token > 0 {
			f = fence
		}
		return job.Run(ctx, scheduler.NewRun(scheduler.RunConfig{Job: "stamp", Instance: "server-a", Token: token, Slot: slot, Fence: f}))
	}

	if err := run(20, slot); err != nil {
		t.Fatalf("run of the claimed slot: %v", err)
	}
	var state string
	if err := pool.QueryRow(ctx, `SELECT state FROM cron_slots WHERE job = 'stamp' AND slot = $1`, slot).Scan(&state); err != nil || state != "done" {
		t.Fatalf("slot state %q, %v; want done in the statement's transaction", state, err)
	}
	if err := run(19, time.Time{}); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("a run with an older token: %v, want a stale-token error", err)
	}
	if err := run(0, time.Time{}); err != nil {
		t.Fatalf("a run that is not a singleton: %v", err)
	}
	got := pulses(t, url)
	if len(got) != 2 || got[0].token != 20 || got[1].token != 0 {
		t.Fatalf("rows %+v: want the token-20 run and the unfenced one, nothing from token 19", got)
	}
}
