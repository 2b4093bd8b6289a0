package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// A run started by an operator ("run now": its command comes later) is a
// Run whose Trigger is manual, built by the runner or by NewRun, and goes
// through the path every run takes: recorded as manual in job_runs, start
// and end, by the runtime role over the warm records pool, and in this
// instance's own view. A Run that names no trigger is the schedule's.
func TestARunsTriggerIsRecordedWithItManualIncluded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(db.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	// As the service's records pool, with one connection: the one whose
	// prepared statements are read at the end.
	cfg.AfterConnect, cfg.MaxConns = WarmRecords, 1
	records, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(records.Close)
	reg, _ := NewRegistry(Type{Name: "rec", New: func(Env, configs.Job) (Job, error) {
		return JobFunc(func(ctx context.Context, r *Run) error {
			return errors.New("asked for by " + string(r.Trigger))
		}), nil
	}})
	spec := configs.Job{Name: "prune", Type: "rec", Grace: time.Second,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Hour}}
	s, err := New(Config{File: &configs.File{Instance: "server-1", Jobs: []configs.Job{spec}}, Registry: reg,
		Pool: dbtest.Pool(t, db.Runtime), Records: records})
	if err != nil {
		t.Fatal(err)
	}
	j := s.jobs[0]

	for _, tc := range []struct {
		what string
		run  *Run
		want Trigger
	}{
		{"the runner's manual run", s.run.newRun(j, 0, time.Time{}, "", hold{}, TriggerManual), TriggerManual},
		{"NewRun's manual run", NewRun(RunConfig{Job: "prune", Instance: "server-1", Trigger: TriggerManual}), TriggerManual},
		{"NewRun without a trigger", NewRun(RunConfig{Job: "prune", Instance: "server-1"}), TriggerSchedule},
		{"a Run built by hand", &Run{Job: "prune", Instance: "server-1", Log: s.log, hold: hold{valid: func() bool { return true }}}, TriggerSchedule},
	} {
		if tc.run.progress == nil {
			tc.run.progress = &j.progress
		}
		_ = s.run.call(ctx, j, tc.run)
		s.rec.writes.Wait() // the run's end is written in the background
		var trigger, result, msg string
		if err := records.QueryRow(ctx, `SELECT trigger, result, error FROM job_runs WHERE job = 'prune' ORDER BY id DESC LIMIT 1`).
			Scan(&trigger, &result, &msg); err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if trigger != string(tc.want) || result != "error" || msg != "asked for by "+string(tc.run.Trigger) {
			t.Errorf("%s: job_runs has trigger %q, result %q, error %q; want %q, error, the job's error", tc.what, trigger, result, msg, tc.want)
		}
		if last := s.Status()[0].LastRun; last == nil || last.Trigger != string(tc.want) || last.Result != "error" {
			t.Errorf("%s: the instance's own view of its last run: %+v; want trigger %q", tc.what, last, tc.want)
		}
	}
	var prepared int64
	if err := records.QueryRow(ctx, `SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM pg_prepared_statements
		WHERE statement = $1`, sqlRunStart).Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared == 0 {
		t.Errorf("the run-start statement never ran prepared on this connection: WarmRecords did not prepare it")
	}
}
