package weeklyreport_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// startWithoutEtcd runs a snip-jobs instance with jobs (all database-mode cron
// singletons) on d's database, with no etcd and no leadership session: what a
// coordination: database deployment runs. The returned stop shuts it down as
// SIGTERM does and returns once every run has ended.
func startWithoutEtcd(t *testing.T, d *db, name string, jobs []configs.Job) (stop func()) {
	t.Helper()
	sched, err := scheduler.New(scheduler.Config{File: &configs.File{Instance: name, Jobs: jobs},
		Registry: jobtest.Registry(t, weeklyreport.Type()), Pool: d.svc, Log: benchtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sched.Run(ctx)
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// slotResources lists the fencing rows of the job's database-mode slots.
func (d *db) slotResources() map[string]string {
	d.t.Helper()
	rows, err := d.pool.Query(context.Background(), `SELECT resource, token::text || ' ' || holder FROM fencing_tokens WHERE resource LIKE $1 || '@%'`, jobName)
	if err != nil {
		d.t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var r, v string
		if err := rows.Scan(&r, &v); err != nil {
			d.t.Fatal(err)
		}
		out[r] = v
	}
	if err := rows.Err(); err != nil {
		d.t.Fatal(err)
	}
	return out
}

// In database mode a rebuild takes its token from the claims' sequence and is
// fenced on the resource of the week's slot, the very row the scheduler's run
// of that slot wrote, with no etcd: a claimer of the slot older than the
// rebuild is refused, and a claim of the slot taken after it is not.
func TestRebuildInDatabaseModeIsOrderedWithTheWeeksSlot(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	week := 7 * 24 * time.Hour // jobtest.Grid(week) fires on Mondays 00:00 UTC
	lastMonday := jobtest.Grid(week).Next(time.Now().Add(-week))
	y, w := lastMonday.Add(-week).ISOWeek()
	reported := fmt.Sprintf("%04d-W%02d", y, w) // the week the lastMonday slot reports

	job := reportJob(week, time.UTC, configs.Database, configs.All)
	job.Schedule.CatchUpWindow = 3 * week
	// The job last ran the Monday before: the lastMonday slot is due.
	d.exec(`INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ($1, $2, 'done', nextval('cron_claim_tokens'), 'server-0')`,
		jobName, lastMonday.Add(-week))
	d.links(map[int64]string{1: "launch"})
	d.clicks(1, lastMonday.Add(-24*time.Hour), 40) // Sunday 00:00 UTC

	stop := startWithoutEtcd(t, d, "server-1", []configs.Job{job})
	d.waitSlots("the instance to run the slot "+lastMonday.String(), func() bool {
		return strings.HasPrefix(d.slotState(jobName, lastMonday), "done")
	})
	stop() // its last fenced write (the slot's outcome) is made before the rebuild
	claim := d.int(`SELECT token FROM cron_slots WHERE job = $1 AND slot = $2`, jobName, lastMonday)
	written := d.slotResources()
	if len(written) != 1 {
		t.Fatalf("fenced slot resources after one run: %v, want one", written)
	}
	var resource string
	for r := range written {
		resource = r // as the scheduler names it
	}
	if got := d.stored(reported); got.Token != claim || got.Instance != "server-1" {
		t.Fatalf("stored %s: token %d by %s; want the claim's %d by server-1", reported, got.Token, got.Instance, claim)
	}

	// Late clicks; the operator rebuilds, with no etcd to take a token from.
	d.clicks(1, lastMonday.Add(-24*time.Hour), 35)
	run, err := weeklyreport.RebuildRun(ctx, weeklyreport.RebuildConfig{Pool: d.svc, Job: job, Week: reported, Operator: "operator@test"})
	if err != nil {
		t.Fatalf("RebuildRun: %v", err)
	}
	if err := weeklyreport.Rebuild(ctx, run, reported); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	rebuilt := d.stored(reported)
	if rebuilt.Token != run.Token || run.Token <= claim || d.show(reported).Total != 75 {
		t.Fatalf("rebuilt: token %d (run's %d), total %d; want a claim token above the slot's %d and 75 clicks",
			rebuilt.Token, run.Token, d.show(reported).Total, claim)
	}
	want := map[string]string{resource: strconv.FormatInt(run.Token, 10) + " " + weeklyreport.RebuildHolder("operator@test")}
	if got := d.slotResources(); !maps.Equal(got, want) {
		t.Fatalf("fenced slot resources after the rebuild: %v; want the slot's own row advanced to the rebuild's token: %v", got, want)
	}

	// The slot's claimer, writing after the rebuild with its older claim, is
	// refused, and says it was the rebuild.
	j, err := weeklyreport.Type().New(scheduler.Env{Instance: "server-1", Pool: d.svc}, job)
	if err != nil {
		t.Fatal(err)
	}
	old := scheduler.NewRun(scheduler.RunConfig{Job: jobName, Instance: "server-1", Token: claim, Slot: lastMonday,
		Fence: fencing.New(d.svc, "server-1"), Resource: resource})
	err = j.Run(ctx, old)
	var stale *fencing.StaleTokenError
	if op, ok := weeklyreport.RebuiltBy(err); !errors.As(err, &stale) || stale.Current != run.Token || !ok || op != "operator@test" ||
		!strings.Contains(err.Error(), "operator's report rebuild") {
		t.Fatalf("the old claim's run after the rebuild: %v; want it refused by the rebuild's token %d, saying so", err, run.Token)
	}

	// A claim of the slot taken after the rebuild (the slot's run is retried)
	// has a newer token: the rebuild does not lock the slot's runs out.
	d.exec(`UPDATE cron_slots SET state = 'failed', finished_at = now() - interval '1 hour' WHERE job = $1 AND slot = $2`, jobName, lastMonday)
	startWithoutEtcd(t, d, "server-2", []configs.Job{job})
	d.waitSlots("the retried slot to be done", func() bool {
		return d.str(`SELECT state || ' ' || instance FROM cron_slots WHERE job = $1 AND slot = $2`, jobName, lastMonday) == "done server-2"
	})
	retry := d.int(`SELECT token FROM cron_slots WHERE job = $1 AND slot = $2`, jobName, lastMonday)
	if retry <= run.Token {
		t.Fatalf("the retry's claim token %d, want one above the rebuild's %d", retry, run.Token)
	}
	want = map[string]string{resource: strconv.FormatInt(retry, 10) + " server-2"}
	if got := d.slotResources(); !maps.Equal(got, want) {
		t.Errorf("fenced slot resources after the retry: %v, want %v", got, want)
	}
	if got := d.stored(reported); got != rebuilt {
		t.Errorf("the retry changed the rebuilt report: %+v, want %+v", got, rebuilt)
	}
	if got := d.outbox(); len(got) != 1 {
		t.Errorf("outbox %+v, want one row", got)
	}
}

// In leader mode a rebuild's token is newer than the current term's: the
// leader's next fenced write (its claim of the next slot) is refused, and it
// takes a new term, newer than the rebuild, and carries on. The rebuilt report
// stays as it is.
func TestAfterARebuildInLeaderModeTheLeaderTakesANewTermAndCarriesOn(t *testing.T) {
	t.Parallel()
	c := jobtest.NewCluster(t)
	job := reportJob(time.Second, steadyZone(t, time.Now()), configs.Leader, configs.Latest)
	c.Start("server-1", jobtest.Registry(t, weeklyreport.Type()), []configs.Job{job})
	c.WaitCommit("the week to be stored", []string{"weekly_reports"}, func() bool { return storedReports(t, c).reports == 1 })
	var week string
	if err := c.DB.QueryRow(context.Background(), `SELECT week FROM weekly_reports`).Scan(&week); err != nil {
		t.Fatal(err)
	}

	run, err := weeklyreport.RebuildRun(context.Background(), weeklyreport.RebuildConfig{Pool: c.DB, Job: job, Week: week,
		Operator: "operator@test", LeaderToken: func(ctx context.Context) (int64, error) {
			return etcdlease.NewCluster(c.Obs, c.Prefix).FreshToken(ctx, "")
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := weeklyreport.Rebuild(context.Background(), run, week); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	var next jobtest.Leader
	c.WaitKeys("a term newer than the rebuild", func() bool {
		l, ok := c.Leader(jobName)
		next = l
		return ok && l.Token > run.Token
	})
	c.WaitCommit("the new term to complete two slots", []string{"cron_slots"}, func() bool {
		var n int
		_ = c.DB.QueryRow(context.Background(), `SELECT count(*) FROM cron_slots WHERE job = $1 AND token = $2 AND state = 'done'`,
			jobName, next.Token).Scan(&n)
		return n >= 2
	})
	var token int64
	var replacements, outbox int
	if err := c.DB.QueryRow(context.Background(), `SELECT token, replacements, (SELECT count(*) FROM weekly_report_outbox)
		FROM weekly_reports WHERE week = $1`, week).Scan(&token, &replacements, &outbox); err != nil {
		t.Fatal(err)
	}
	if token != run.Token || replacements != 1 || outbox != 1 {
		t.Fatalf("week %s: token %d, %d replacements, %d outbox rows; want the rebuild's %d, 1, 1", week, token, replacements, outbox, run.Token)
	}
}
