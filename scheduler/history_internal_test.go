package scheduler

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// The history stays bounded: each job keeps its newest KeepRuns runs;
// terms, refusals, finished cron slots and manual runs over for longer than
// KeepHistory go, but never a cron job's newest slot, a term still the
// newest of its job, nor an open manual run.
// Run as the runtime role: its grants allow exactly this.
func TestTheHistoryIsPrunedToItsBounds(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	super, runtime := dbtest.Pool(t, db.Super), dbtest.Pool(t, db.Runtime)
	old := time.Now().Add(-KeepHistory - time.Hour)
	benchtest.Exec(t, super, `INSERT INTO job_runs (job, instance, started_at) SELECT 'busy', 'a', now() FROM generate_series(1, $1)`, KeepRuns+250)
	benchtest.Exec(t, super, `INSERT INTO job_runs (job, instance) SELECT 'quiet', 'a' FROM generate_series(1, 10)`)
	benchtest.Exec(t, super, `INSERT INTO job_terms (job, token, instance, started_at, ended_at) VALUES
		('busy', 1, 'a', $1, $1),                -- old and ended: goes
		('busy', 2, 'a', $1, NULL),              -- old, never ended, a later term exists: goes
		('busy', 3, 'a', now(), now()),          -- recent: stays
		('quiet', 7, 'a', $1, NULL)              -- old, never ended, the newest of its job: stays`, old)
	benchtest.Exec(t, super, `INSERT INTO fence_rejections (resource, token, current, instance, at) VALUES ('r', 1, 2, 'a', $1), ('r', 2, 3, 'a', now())`, old)
	benchtest.Exec(t, super, `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES
		('report', $1, 'done', 1, 'a'),
		('report', $1 + interval '1 minute', 'skipped', 1, 'a'),
		('report', now() - interval '1 hour', 'done', 1, 'a'),
		('lonely', $1, 'done', 1, 'a')           -- its job's newest: stays`, old)
	benchtest.Exec(t, super, `INSERT INTO manual_runs (job, mode, requested_by, requested_at, state, finished_at) VALUES
		('busy', 'leader', 'op', $1, 'done', $1),                 -- old and over: goes
		('quiet', 'everywhere', 'op', $1, 'failed', now()),       -- over lately: stays
		('report', 'leader', 'op', $1, 'pending', NULL)           -- open, however old: stays`, old)

	newest := benchtest.Value[int64](t, super, `SELECT max(id) FROM job_runs WHERE job = 'busy'`)
	s := &Scheduler{cfg: Config{Pool: runtime}, log: slog.New(slog.DiscardHandler)}
	for _, name := range []string{"busy", "quiet"} {
		s.jobs = append(s.jobs, &job{spec: configs.Job{Name: name}})
	}
	for _, name := range []string{"report", "lonely"} {
		s.jobs = append(s.jobs, &job{spec: configs.Job{Name: name, Schedule: configs.Schedule{Kind: configs.Cron, CatchUpWindow: time.Hour}}})
	}
	if n := s.pruneOnce(context.Background()); n != 250+2+1+2+1 {
		t.Errorf("pruned %d rows, want %d", n, 250+2+1+2+1)
	}
	for _, c := range []struct {
		what, sql string
		want      int
	}{
		{"busy's runs", `SELECT count(*) FROM job_runs WHERE job = 'busy'`, KeepRuns},
		{"busy's runs older than its newest KeepRuns", `SELECT count(*) FROM job_runs WHERE job = 'busy' AND id <= $1`, 0},
		{"quiet's runs", `SELECT count(*) FROM job_runs WHERE job = 'quiet'`, 10},
		{"terms", `SELECT count(*) FROM job_terms`, 2},
		{"quiet's never-ended newest term", `SELECT count(*) FROM job_terms WHERE job = 'quiet'`, 1},
		{"refusals", `SELECT count(*) FROM fence_rejections`, 1},
		{"report's slots", `SELECT count(*) FROM cron_slots WHERE job = 'report'`, 1},
		{"lonely's slots", `SELECT count(*) FROM cron_slots WHERE job = 'lonely'`, 1},
		{"manual runs", `SELECT count(*) FROM manual_runs`, 2},
	} {
		var args []any
		if strings.Contains(c.sql, "$1") {
			args = append(args, newest-KeepRuns)
		}
		if got := benchtest.Value[int](t, super, c.sql, args...); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	if n := s.pruneOnce(context.Background()); n != 0 {
		t.Errorf("a second pass pruned %d rows; the first left nothing beyond the bounds", n)
	}
}
