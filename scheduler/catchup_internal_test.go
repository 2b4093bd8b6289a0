package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/robfig/cron/v3"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

type fiveMinutes struct{}

func (fiveMinutes) Next(t time.Time) time.Time {
	return t.Truncate(5 * time.Minute).Add(5 * time.Minute)
}

// The catch-up policy decides what happens to slots missed while nobody ran the
// job; a slot that fell due within the last minute runs whatever the policy.
// Each case sweeps once at a chosen instant against a real database. The
// runs of the missed slots are recorded in job_runs as catch-up runs (and
// counted), the on-time one as the schedule's.
func TestCatchUpPolicies(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC) // last slot that ran
	after := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	cases := []struct {
		policy      configs.CatchUpPolicy
		now         time.Time
		wantRun     []time.Time
		wantSkipped int
		wantCatchUp int // the oldest of wantRun run late; the others on time
	}{
		// Six slots missed (08:05 … 08:30), none due within the last minute.
		{configs.All, after(32), []time.Time{after(5), after(10), after(15), after(20), after(25), after(30)}, 0, 6},
		{configs.Latest, after(32), []time.Time{after(30)}, 5, 1},
		{configs.None, after(32), nil, 6, 0},
		// 08:30 fell due 30 s ago: it runs whatever the policy; 08:05 … 08:25 are missed.
		{configs.All, after(30).Add(30 * time.Second), []time.Time{after(5), after(10), after(15), after(20), after(25), after(30)}, 0, 5},
		{configs.Latest, after(30).Add(30 * time.Second), []time.Time{after(30)}, 5, 0},
		{configs.None, after(30).Add(30 * time.Second), []time.Time{after(30)}, 5, 0},
	}
	_, pool := dbtest.New(t)

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
			if err := s.run.databaseCron(s.jobs[0]).SweepAt(context.Background(), tc.now); err != nil {
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
			var want []string
			for k, slot := range tc.wantRun {
				trigger := TriggerSchedule
				if k < tc.wantCatchUp {
					trigger = TriggerCatchUp
				}
				want = append(want, slot.Format("15:04 ")+string(trigger))
			}
			if got := runTriggers(t, pool, name); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("job_runs: %q, want %q", got, want)
			}
			if n := testutil.ToFloat64(s.m.slotsCaughtUp.WithLabelValues(name)); n != float64(tc.wantCatchUp) {
				t.Errorf("%v slots counted caught up, want %d", n, tc.wantCatchUp)
			}
		})
	}
}

// runTriggers lists job's runs in job_runs as "slot trigger" (UTC), oldest
// first.
func runTriggers(t *testing.T, pool *pgxpool.Pool, job string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT slot, trigger FROM job_runs WHERE job = $1 ORDER BY id`, job)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var slot time.Time
	var trigger string
	if _, err := pgx.ForEachRow(rows, []any{&slot, &trigger}, func() error {
		out = append(out, slot.UTC().Format("15:04 ")+trigger)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A job's first sweep does not treat the whole window as missed: it records the
// latest due slot as skipped and runs nothing.
func TestFirstSweepOfANewJobStartsHistoryWithoutRunningOldSlots(t *testing.T) {
	t.Parallel()
	_, pool := dbtest.New(t)
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
	if err := s.run.databaseCron(s.jobs[0]).SweepAt(context.Background(), now); err != nil {
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

// weeklyJob is a job on "0 8 * * MON" (UTC) whose runs are recorded, with a
// catch-up window (24 h) shorter than its period, on a fresh database.
func weeklyJob(t *testing.T, policy configs.CatchUpPolicy) (*Scheduler, *[]time.Time, *pgxpool.Pool) {
	t.Helper()
	_, pool := dbtest.New(t)
	weekly, err := cron.ParseStandard("0 8 * * MON")
	if err != nil {
		t.Fatal(err)
	}
	var ran []time.Time
	reg, _ := NewRegistry(Type{Name: "rec", New: func(Env, configs.Job) (Job, error) {
		return JobFunc(func(ctx context.Context, r *Run) error { ran = append(ran, r.Slot.UTC()); return nil }), nil
	}})
	spec := configs.Job{Name: "report", Type: "rec", Singleton: true, Schedule: configs.Schedule{
		Kind: configs.Cron, Spec: weekly, Location: time.UTC, Coordination: configs.Database,
		CatchUp: policy, CatchUpWindow: 24 * time.Hour}}
	s, err := New(Config{File: &configs.File{Instance: "server-1", Jobs: []configs.Job{spec}}, Registry: reg, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	return s, &ran, pool
}

// slotStates lists the job's cron_slots as "slot state", oldest first.
func slotStates(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT slot, state FROM cron_slots WHERE job = 'report' ORDER BY slot`)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var slot time.Time
	var state string
	if _, err := pgx.ForEachRow(rows, []any{&slot, &state}, func() error {
		out = append(out, slot.UTC().Format("Mon 2006-01-02 15:04")+" "+state)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A weekly job deployed on a Wednesday, with a catch-up window of a day: its
// first sweep finds nothing due in the window, and history starts at the
// Monday before (however far back); the next Monday's slot, when it comes,
// is the job's first on-time slot and runs.
func TestANewJobRunsItsFirstSlotWhenItsPeriodIsLongerThanTheWindow(t *testing.T) {
	t.Parallel()
	s, ran, pool := weeklyJob(t, configs.All)
	deployed := time.Date(2026, 11, 4, 15, 0, 0, 0, time.UTC) // a Wednesday
	monday := time.Date(2026, 11, 9, 8, 0, 0, 0, time.UTC)
	for _, now := range []time.Time{deployed, deployed.Add(time.Hour), monday.Add(time.Second)} {
		if err := s.run.databaseCron(s.jobs[0]).SweepAt(context.Background(), now); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(*ran) != fmt.Sprint([]time.Time{monday}) {
		t.Errorf("ran %v, want only the first Monday after the deployment, %v", *ran, monday)
	}
	want := []string{"Mon 2026-11-02 08:00 skipped", "Mon 2026-11-09 08:00 done"}
	if got := slotStates(t, pool); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("cron_slots %q, want %q", got, want)
	}
	if n := testutil.ToFloat64(s.m.slotsMissed.WithLabelValues("report")); n != 0 {
		t.Errorf("%v slots counted missed, want 0: the Monday before the deployment was not the job's", n)
	}
}

// Slots missed longer ago than the catch-up window are not run, but they are
// not lost without a trace either: recorded as skipped, counted and logged.
// Here the last run was on 2 November and nothing ran until Tuesday 10
// November 09:00, 25 hours after the 9 November slot.
func TestSlotsMissedBeforeTheWindowAreRecordedAsSkippedAndCounted(t *testing.T) {
	t.Parallel()
	for _, policy := range []configs.CatchUpPolicy{configs.All, configs.Latest} {
		t.Run(policy.String(), func(t *testing.T) {
			s, ran, pool := weeklyJob(t, policy)
			benchtest.Exec(t, pool, `INSERT INTO cron_slots (job, slot, state, token, instance)
				VALUES ('report', '2026-11-02 08:00Z', 'done', 1, 'server-0')`)
			// Swept twice, as by two instances in database mode: counted once.
			for range 2 {
				if err := s.run.databaseCron(s.jobs[0]).SweepAt(context.Background(), time.Date(2026, 11, 10, 9, 0, 0, 0, time.UTC)); err != nil {
					t.Fatal(err)
				}
			}
			if len(*ran) != 0 {
				t.Errorf("ran %v, want nothing: the slot is older than the window", *ran)
			}
			want := []string{"Mon 2026-11-02 08:00 done", "Mon 2026-11-09 08:00 skipped"}
			if got := slotStates(t, pool); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("cron_slots %q, want %q", got, want)
			}
			if n := testutil.ToFloat64(s.m.slotsMissed.WithLabelValues("report")); n != 1 {
				t.Errorf("%v slots counted missed, want 1", n)
			}
		})
	}
}
