package weeklyreport_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// These tests run the report under the real scheduler, on real etcd and
// PostgreSQL, with instances started and killed in the test process. The cron
// fires every second instead of every Monday, in a zone where every slot of
// the test reports the same week (steadyZone), so "one report per week" is
// checked against many slots.

type stored struct {
	reports, outbox int
	token           int64
	instance        string
}

func storedReports(t *testing.T, c *jobtest.Cluster) stored {
	t.Helper()
	var s stored
	err := c.DB.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM weekly_reports), (SELECT count(*) FROM weekly_report_outbox),
		coalesce((SELECT max(token) FROM weekly_reports), 0), coalesce((SELECT max(instance) FROM weekly_reports), '')`).
		Scan(&s.reports, &s.outbox, &s.token, &s.instance)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func reportJob(every time.Duration, loc *time.Location, coord configs.Coordination, policy configs.CatchUpPolicy) configs.Job {
	j := jobtest.CronJob(jobName, "weeklyreport", every, loc, coord, policy)
	return j
}

// steadyZone returns a zone with a fixed whole-hour offset (Etc/GMT-14 to
// Etc/GMT+12) in which now is at least 12 hours away from every Monday 00:00.
// The scheduler's slots are real instants and the job's zone decides which
// week each one reports: in this zone every slot of a test that lasts less
// than 12 hours reports the same week, whatever the date it runs on. (Of the
// 27 offsets, the farthest from the nearest local Monday 00:00 is always at
// least 13 hours away.)
func steadyZone(t *testing.T, now time.Time) *time.Location {
	t.Helper()
	var best *time.Location
	var bestGap time.Duration
	for offset := -12; offset <= 14; offset++ {
		name := "Etc/GMT"
		switch { // Etc/GMT-N is N hours east of Greenwich
		case offset > 0:
			name += fmt.Sprintf("-%d", offset)
		case offset < 0:
			name += fmt.Sprintf("+%d", -offset)
		}
		loc := mustLoad(t, name)
		y, m, d := now.In(loc).Date()
		day := time.Date(y, m, d, 0, 0, 0, 0, loc)
		monday := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		if gap := min(now.Sub(monday), monday.AddDate(0, 0, 7).Sub(now)); gap > bestGap {
			best, bestGap = loc, gap
		}
	}
	if bestGap < 12*time.Hour {
		t.Fatalf("no zone has %v at least 12 hours from a Monday 00:00 (best %v in %v)", now, bestGap, best)
	}
	return best
}

// The leader is killed inside its run of the slot: the successor takes that
// very slot over with its newer token, and its run of it stores the one
// report; later slots of the same week store nothing more.
func TestLeaderKilledAtTheSlotGivesOneReportWrittenByTheSuccessor(t *testing.T) {
	t.Parallel()
	c := jobtest.NewCluster(t)
	type entry struct {
		slot  time.Time
		token int64
	}
	entered := make(chan entry, 1)
	wrapped := jobtest.WrapRuns(weeklyreport.Type(), func(ctx context.Context, r *scheduler.Run, run jobtest.RunFunc) error {
		if r.Instance == "server-1" { // killed at the slot, before it writes
			entered <- entry{r.Slot, r.Token}
			<-ctx.Done()
			return ctx.Err()
		}
		return run(ctx, r)
	})
	reg := jobtest.Registry(t, wrapped)
	jobs := []configs.Job{reportJob(time.Second, steadyZone(t, time.Now()), configs.Leader, configs.Latest)}
	first := c.Start("server-1", reg, jobs)
	killed := <-entered
	c.Start("server-2", reg, jobs)
	first.Crash()

	// Every slot reports the same week, so a successor that skipped the killed
	// slot would still store the report at a later one: the killed slot's own
	// row must be done, by the successor, in the report's transaction.
	c.WaitCommit("the killed slot "+killed.slot.String()+" to be done", []string{"cron_slots"}, func() bool {
		var state string
		_ = c.DB.QueryRow(context.Background(), `SELECT state FROM cron_slots WHERE job = $1 AND slot = $2`, jobName, killed.slot).Scan(&state)
		return state == "done"
	})
	leader, _ := c.Leader(jobName)
	var (
		token             int64
		instance          string
		finished, created time.Time
	)
	if err := c.DB.QueryRow(context.Background(), `SELECT s.token, s.instance, s.finished_at, r.created_at
		FROM cron_slots s, weekly_reports r WHERE s.job = $1 AND s.slot = $2`, jobName, killed.slot).
		Scan(&token, &instance, &finished, &created); err != nil {
		t.Fatal(err)
	}
	if token != leader.Token || token <= killed.token || instance != "server-2" {
		t.Fatalf("killed slot done by %s with token %d; want server-2 with its token %d (server-1's was %d)",
			instance, token, leader.Token, killed.token)
	}
	// now() is the transaction's start: equal only if one transaction stored
	// the report and completed the killed slot.
	if !finished.Equal(created) {
		t.Fatalf("killed slot completed at %v, report created at %v: the report was not stored by the killed slot's run", finished, created)
	}

	c.WaitCommit("three more slots of the same week to be done", []string{"cron_slots"}, func() bool {
		var n int
		_ = c.DB.QueryRow(context.Background(), `SELECT count(*) FROM cron_slots WHERE job = $1 AND slot > $2 AND state = 'done'`,
			jobName, killed.slot).Scan(&n)
		return n >= 3
	})
	got := storedReports(t, c)
	if got.reports != 1 || got.outbox != 1 || got.instance != "server-2" || got.token != leader.Token {
		t.Fatalf("stored %+v; want one report and one outbox row, written by server-2 with token %d", got, leader.Token)
	}
}

// Three instances in database mode fire every slot: each slot is claimed once
// and run once, by one instance, and the week gets one report and one outbox
// row. (The week's primary key alone would keep the report single: the claims
// are what keep the runs single.)
func TestThreeInstancesInDatabaseModeStoreOneReport(t *testing.T) {
	t.Parallel()
	c := jobtest.NewCluster(t)
	var mu sync.Mutex
	ran := map[time.Time][]string{} // slot (UTC) -> the instances that ran it
	counted := jobtest.WrapRuns(weeklyreport.Type(), func(ctx context.Context, r *scheduler.Run, run jobtest.RunFunc) error {
		mu.Lock()
		ran[r.Slot.UTC()] = append(ran[r.Slot.UTC()], r.Instance)
		mu.Unlock()
		return run(ctx, r)
	})
	reg := jobtest.Registry(t, counted)
	jobs := []configs.Job{reportJob(time.Second, steadyZone(t, time.Now()), configs.Database, configs.Latest)}
	var nodes []*jobtest.Node
	for _, name := range []string{"server-1", "server-2", "server-3"} {
		nodes = append(nodes, c.Start(name, reg, jobs))
	}
	type slotRow struct {
		Slot     time.Time
		Attempts int
		Instance string
	}
	var done []slotRow
	c.WaitCommit("five slots to be done", []string{"cron_slots"}, func() bool {
		rows, _ := c.DB.Query(context.Background(), `SELECT slot, attempts, instance FROM cron_slots
			WHERE job = $1 AND state = 'done' ORDER BY slot`, jobName)
		var err error
		done, err = pgx.CollectRows(rows, pgx.RowToStructByPos[slotRow])
		return err == nil && len(done) >= 5
	})
	// A done slot is never claimed again: once the instances have stopped,
	// the runs counted for these slots are all there will ever be.
	for _, n := range nodes {
		n.Stop()
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range done {
		if got := ran[s.Slot.UTC()]; s.Attempts != 1 || !slices.Equal(got, []string{s.Instance}) {
			t.Errorf("slot %v: %d claims, run by %v; want one claim and one run, by %s", s.Slot, s.Attempts, got, s.Instance)
		}
	}
	if got := storedReports(t, c); got.reports != 1 || got.outbox != 1 {
		t.Fatalf("stored %+v; want one report and one outbox row", got)
	}
}

// Two Mondays passed while nobody ran the job. With catch_up: all both weeks
// get their report; with latest only the last one does.
func TestMissedWeeksAreCaughtUpByPolicy(t *testing.T) {
	t.Parallel()
	week := 7 * 24 * time.Hour // jobtest.Grid(week) fires on Mondays 00:00 UTC
	lastMonday := jobtest.Grid(week).Next(time.Now().Add(-week))
	for _, tc := range []struct {
		policy configs.CatchUpPolicy
		want   int
	}{{configs.All, 2}, {configs.Latest, 1}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			c := jobtest.NewCluster(t)
			// The job last ran three Mondays ago.
			if _, err := c.DB.Exec(context.Background(), `INSERT INTO cron_slots (job, slot, state, token, instance)
				VALUES ($1, $2, 'done', 1, 'server-0')`, jobName, lastMonday.Add(-2*week)); err != nil {
				t.Fatal(err)
			}
			job := reportJob(week, time.UTC, configs.Leader, tc.policy)
			job.Schedule.CatchUpWindow = 5 * week
			c.Start("server-1", jobtest.Registry(t, weeklyreport.Type()), []configs.Job{job})
			c.WaitCommit("the catch-up to finish", []string{"cron_slots"}, func() bool {
				var open int
				_ = c.DB.QueryRow(context.Background(), `SELECT count(*) FROM cron_slots WHERE job = $1 AND slot > $2 AND state IN ('done', 'skipped')`,
					jobName, lastMonday.Add(-2*week)).Scan(&open)
				return open == 2
			})
			if got := storedReports(t, c); got.reports != tc.want || got.outbox != tc.want {
				t.Fatalf("policy %s: stored %+v; want %d reports", tc.policy, got, tc.want)
			}
			r, err := weeklyreport.Show(context.Background(), c.DB, "")
			if err != nil {
				t.Fatal(err)
			}
			if !r.End.Equal(lastMonday) {
				t.Fatalf("latest report ends %v, want the week before %v", r.End, lastMonday)
			}
		})
	}
}
