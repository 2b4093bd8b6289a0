package weeklyreport_test

import (
	"context"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/jobtest"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/scheduler"
)

// These tests run the report under the real scheduler, on real etcd and
// PostgreSQL, with instances started and killed in the test process. The cron
// fires every second instead of every Monday; every slot of one day reports the
// same week, so "one report per week" is checked against many slots.

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

func reportJob(every time.Duration, coord configs.Coordination, policy configs.CatchUpPolicy) configs.Job {
	j := jobtest.CronJob(jobName, "weeklyreport", every, time.UTC, coord, policy)
	j.Options = weeklyreport.Type().Options()
	return j
}

// The leader is killed inside its run of the slot: one report, written by the
// successor.
func TestLeaderKilledAtTheSlotGivesOneReportWrittenByTheSuccessor(t *testing.T) {
	c := jobtest.NewCluster(t)
	entered := make(chan struct{}, 1)
	real := weeklyreport.Type()
	wrapped := real
	wrapped.New = func(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
		job, err := real.New(env, spec)
		if err != nil {
			return nil, err
		}
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			if r.Instance == "server-1" { // killed at the slot, before it writes
				entered <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}
			return job.Run(ctx, r)
		}), nil
	}
	reg := jobtest.Registry(t, wrapped)
	jobs := []configs.Job{reportJob(time.Second, configs.Leader, configs.Latest)}
	first := c.Start("server-1", reg, jobs)
	<-entered
	c.Start("server-2", reg, jobs)
	first.Crash()

	jobtest.Eventually(t, "the successor to store the report", func() bool { return storedReports(t, c).reports == 1 })
	leader, _ := c.Leader(jobName)
	time.Sleep(3 * time.Second) // several more slots of the same week
	got := storedReports(t, c)
	if got.reports != 1 || got.outbox != 1 || got.instance != "server-2" || got.token != leader.Token {
		t.Fatalf("stored %+v; want one report and one outbox row, written by server-2 with token %d", got, leader.Token)
	}
}

// Three instances in database mode fire every slot: one report, one outbox row.
func TestThreeInstancesInDatabaseModeStoreOneReport(t *testing.T) {
	c := jobtest.NewCluster(t)
	reg := jobtest.Registry(t, weeklyreport.Type())
	jobs := []configs.Job{reportJob(time.Second, configs.Database, configs.Latest)}
	for _, name := range []string{"server-1", "server-2", "server-3"} {
		c.Start(name, reg, jobs)
	}
	jobtest.Eventually(t, "several slots to be done", func() bool {
		var done int
		_ = c.DB.QueryRow(context.Background(), `SELECT count(*) FROM cron_slots WHERE job = $1 AND state = 'done'`, jobName).Scan(&done)
		return done >= 4
	})
	if got := storedReports(t, c); got.reports != 1 || got.outbox != 1 {
		t.Fatalf("stored %+v; want one report and one outbox row", got)
	}
}

// Two Mondays passed while nobody ran the job. With catch_up: all both weeks
// get their report; with latest only the last one does.
func TestMissedWeeksAreCaughtUpByPolicy(t *testing.T) {
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
			job := reportJob(week, configs.Leader, tc.policy)
			job.Schedule.CatchUpWindow = 5 * week
			c.Start("server-1", jobtest.Registry(t, weeklyreport.Type()), []configs.Job{job})
			jobtest.Eventually(t, "the catch-up to finish", func() bool {
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
