package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/testdb"
)

type fiveMinutes struct{}

func (fiveMinutes) Next(t time.Time) time.Time {
	return t.Truncate(5 * time.Minute).Add(5 * time.Minute)
}

// The catch-up policy decides what happens to slots missed while nobody ran the
// job; a slot that fell due within the last minute runs whatever the policy.
// Each case sweeps once at a chosen instant against a real database.
func TestCatchUpPolicies(t *testing.T) {
	base := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC) // last slot that ran
	after := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	cases := []struct {
		policy      configs.CatchUpPolicy
		now         time.Time
		wantRun     []time.Time
		wantSkipped int
	}{
		// Six slots missed (08:05 … 08:30), none due within the last minute.
		{configs.All, after(32), []time.Time{after(5), after(10), after(15), after(20), after(25), after(30)}, 0},
		{configs.Latest, after(32), []time.Time{after(30)}, 5},
		{configs.None, after(32), nil, 6},
		// 08:30 fell due 30 s ago: it runs whatever the policy; 08:05 … 08:25 are missed.
		{configs.All, after(30).Add(30 * time.Second), []time.Time{after(5), after(10), after(15), after(20), after(25), after(30)}, 0},
		{configs.Latest, after(30).Add(30 * time.Second), []time.Time{after(30)}, 5},
		{configs.None, after(30).Add(30 * time.Second), []time.Time{after(30)}, 5},
	}
	_, pool := testdb.New(t)

	for i, tc := range cases {
		t.Run(fmt.Sprintf("%s-at-%s", tc.policy, tc.now.Format("15:04:05")), func(t *testing.T) {
			name := fmt.Sprintf("report-%d", i)
			var mu sync.Mutex
			var ran []time.Time
			reg, _ := NewRegistry(Type{Name: "rec", New: func(Env, configs.Job) (Job, error) {
				return JobFunc(func(ctx context.Context, r *Run) error {
					mu.Lock()
					ran = append(ran, r.Slot.UTC())
					mu.Unlock()
					return nil
				}), nil
			}})
			spec := configs.Job{Name: name, Type: "rec", Singleton: true, Grace: time.Second, Schedule: configs.Schedule{
				Kind: configs.Cron, Spec: fiveMinutes{}, Location: time.UTC, Coordination: configs.Database,
				CatchUp: tc.policy, CatchUpWindow: 24 * time.Hour}}
			s, err := New(Config{File: &configs.File{Instance: "server-1", Jobs: []configs.Job{spec}}, Registry: reg, Pool: pool})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(context.Background(), `INSERT INTO cron_slots (job, slot, state, token, instance)
				VALUES ($1, $2, 'done', 1, 'server-0')`, name, base); err != nil {
				t.Fatal(err)
			}
			if err := s.sweepAt(context.Background(), s.jobs[0], databaseClaims{s: s}, tc.now); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ran) != fmt.Sprint(tc.wantRun) {
				t.Errorf("ran %v, want %v", ran, tc.wantRun)
			}
			var skipped, done int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE state = 'skipped'),
				count(*) FILTER (WHERE state = 'done') FROM cron_slots WHERE job = $1`, name).Scan(&skipped, &done); err != nil {
				t.Fatal(err)
			}
			if skipped != tc.wantSkipped || done != 1+len(tc.wantRun) {
				t.Errorf("cron_slots: %d skipped, %d done; want %d skipped, %d done", skipped, done, tc.wantSkipped, 1+len(tc.wantRun))
			}
		})
	}
}

// A job's first sweep does not treat the whole window as missed: it records the
// latest due slot as skipped and runs nothing.
func TestFirstSweepOfANewJobStartsHistoryWithoutRunningOldSlots(t *testing.T) {
	_, pool := testdb.New(t)
	runs := 0
	reg, _ := NewRegistry(Type{Name: "rec", New: func(Env, configs.Job) (Job, error) {
		return JobFunc(func(context.Context, *Run) error { runs++; return nil }), nil
	}})
	spec := configs.Job{Name: "report", Type: "rec", Singleton: true, Schedule: configs.Schedule{
		Kind: configs.Cron, Spec: fiveMinutes{}, Location: time.UTC, Coordination: configs.Database,
		CatchUp: configs.All, CatchUpWindow: 24 * time.Hour}}
	s, err := New(Config{File: &configs.File{Instance: "server-1", Jobs: []configs.Job{spec}}, Registry: reg, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 2, 8, 2, 0, 0, time.UTC)
	if err := s.sweepAt(context.Background(), s.jobs[0], databaseClaims{s: s}, now); err != nil {
		t.Fatal(err)
	}
	var n int
	var slot time.Time
	if err := pool.QueryRow(context.Background(), `SELECT count(*), max(slot) FROM cron_slots WHERE job = 'report'`).Scan(&n, &slot); err != nil {
		t.Fatal(err)
	}
	if runs != 0 || n != 1 || !slot.Equal(time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("first sweep ran %d slots and recorded %d (latest %v); want 0 runs and one skipped 08:00 slot", runs, n, slot)
	}
}
