package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

const reportJobYAML = `
  - name: weekly-report
    type: weeklyreport
    singleton: true
    cron: "0 8 * * MON"
    timezone: Europe/Paris
    catch_up: all
    catch_up_window: 336h
`

// report show prints the stored week; report rebuild replaces it from the
// current counts, fenced by a fresh token from the leadership backend (an
// etcd revision; the job Lease's count on Kubernetes), without a second
// outbox row.
func TestReportShowAndRebuild(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"etcd", "kubernetes"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			c := config{instance: "server-1", adminPort: freePort(t), jobs: reportJobYAML}
			var cluster leadership.Cluster
			if backend == "etcd" {
				etcd := etcdtest.Start(t, 1)
				c.endpoints, cluster = etcd.Endpoints(), etcdlease.NewCluster(etcd.Client(t), testPrefix)
			} else {
				kube := startKube(t)
				c.kube, cluster = kube.section, kubelease.NewCluster(kube.cs.CoordinationV1(), kube.ns, kubePrefix)
			}
			showAndRebuild(t, c, cluster)
		})
	}
}

func showAndRebuild(t *testing.T, c config, cluster leadership.Cluster) {
	url := benchtest.PostgresDB(t)
	path := writeConfig(t, c)
	env := dbEnv(migrate(t, path, url))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	// Week 2026-W47 (Paris): 16–22 November. The Monday 23 November 08:00 slot
	// reports it; the leader stores it with its term's token.
	leaderToken, err := cluster.FreshToken(ctx, "weekly-report")
	if err != nil {
		t.Fatal(err)
	}
	dbtest.Exec(t, url, `INSERT INTO links (id, slug) VALUES (1, 'launch');
		INSERT INTO link_hourly_counts (link_id, hour, clicks) VALUES (1, '2026-11-18 10:00Z', 40)`)
	slot := time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ('weekly-report', $1, 'running', $2, 'server-1')`,
		slot, leaderToken); err != nil {
		t.Fatal(err)
	}
	f, err := configs.Load(path, registry())
	if err != nil {
		t.Fatal(err)
	}
	job, err := weeklyreport.Type().New(scheduler.Env{Instance: "server-1", Pool: pool}, f.Jobs[0])
	if err != nil {
		t.Fatal(err)
	}
	run := scheduler.NewRun(scheduler.RunConfig{Job: "weekly-report", Instance: "server-1", Token: leaderToken, Slot: slot, Fence: fencing.New(pool, "server-1")})
	if err := job.Run(ctx, run); err != nil {
		t.Fatal(err)
	}

	show := snip(t, env, "report", "show", "--config", path, "--week", "2026-W47")
	if show.code != 0 || !strings.Contains(show.stdout, "2026-W47") || !strings.Contains(show.stdout, "40") {
		t.Fatalf("report show: exit %d\n%s%s", show.code, show.stdout, show.stderr)
	}

	// Late clicks were counted; the operator rebuilds the week.
	dbtest.Exec(t, url, `UPDATE link_hourly_counts SET clicks = 75 WHERE link_id = 1`)
	rebuild := snip(t, env, "report", "rebuild", "--config", path, "--week", "2026-W47")
	if rebuild.code != 0 || !strings.Contains(rebuild.stdout, "rebuilt") {
		t.Fatalf("report rebuild: exit %d\n%s%s", rebuild.code, rebuild.stdout, rebuild.stderr)
	}
	r, err := weeklyreport.Show(ctx, pool, "2026-W47")
	if err != nil {
		t.Fatal(err)
	}
	var reports, outbox int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM weekly_reports), (SELECT count(*) FROM weekly_report_outbox)`).Scan(&reports, &outbox); err != nil {
		t.Fatal(err)
	}
	if r.Total != 75 || r.Stored.Token <= leaderToken || reports != 1 || outbox != 1 {
		t.Fatalf("after rebuild: total %d, token %d, %d reports, %d outbox rows; want 75, a token above %d, 1, 1",
			r.Total, r.Stored.Token, reports, outbox, leaderToken)
	}

	// The old leader, writing after the rebuild with its older token, is refused.
	stale := scheduler.NewRun(scheduler.RunConfig{Job: "weekly-report", Instance: "server-1", Token: leaderToken, Fence: fencing.New(pool, "server-1")})
	if err := weeklyreport.Rebuild(ctx, stale, "2026-W47"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a rebuild with the leader's older token after the operator's: %v; want it refused", err)
	}

	missing := snip(t, env, "report", "show", "--config", path, "--week", "2020-W01")
	if missing.code != 1 || !strings.Contains(missing.stderr, "no stored report for 2020-W01") {
		t.Fatalf("report show of a missing week: exit %d\n%s", missing.code, missing.stderr)
	}
}

// In database mode report rebuild needs no etcd (the config's endpoint answers
// nothing): its token is a claim token from the database, and it is fenced on
// the week's slot, the resource the slot's database-mode runs write through.
func TestReportRebuildInDatabaseModeNeedsNoEtcd(t *testing.T) {
	t.Parallel()
	url := benchtest.PostgresDB(t)
	nobody := benchtest.Listen(t) // accepts connections, never answers
	path := writeConfig(t, config{instance: "server-1", endpoints: []string{"http://" + nobody.Addr().String()},
		adminPort: freePort(t), jobs: reportJobYAML + "    coordination: database\n"})
	env := dbEnv(migrate(t, path, url))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	// The Monday 23 November 08:00 (Paris) slot reports 2026-W47; an instance
	// claimed it from the sequence, as the scheduler does, and stored the week
	// fenced on <job>@<slot>.
	dbtest.Exec(t, url, `INSERT INTO links (id, slug) VALUES (1, 'launch');
		INSERT INTO link_hourly_counts (link_id, hour, clicks) VALUES (1, '2026-11-18 10:00Z', 40)`)
	slot := time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	const resource = "weekly-report@2026-11-23T07:00:00Z"
	var claim int64
	if err := pool.QueryRow(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance, claim_until)
		VALUES ('weekly-report', $1, 'running', nextval('cron_claim_tokens'), 'server-1', now() + interval '10 minutes') RETURNING token`,
		slot).Scan(&claim); err != nil {
		t.Fatal(err)
	}
	f, err := configs.Load(path, registry())
	if err != nil {
		t.Fatal(err)
	}
	if f.Jobs[0].Schedule.Coordination != configs.Database {
		t.Fatalf("the job's coordination is %s, want database", f.Jobs[0].Schedule.Coordination)
	}
	job, err := weeklyreport.Type().New(scheduler.Env{Instance: "server-1", Pool: pool}, f.Jobs[0])
	if err != nil {
		t.Fatal(err)
	}
	claimed := func() *scheduler.Run {
		return scheduler.NewRun(scheduler.RunConfig{Job: "weekly-report", Instance: "server-1", Token: claim, Slot: slot,
			Resource: resource, Fence: fencing.New(pool, "server-1")})
	}
	if err := job.Run(ctx, claimed()); err != nil {
		t.Fatal(err)
	}

	dbtest.Exec(t, url, `UPDATE link_hourly_counts SET clicks = 75 WHERE link_id = 1`)
	rebuild := snip(t, env, "report", "rebuild", "--config", path, "--week", "2026-W47")
	if rebuild.code != 0 || !strings.Contains(rebuild.stdout, "rebuilt (claim token") {
		t.Fatalf("report rebuild: exit %d\n%s%s", rebuild.code, rebuild.stdout, rebuild.stderr)
	}
	r, err := weeklyreport.Show(ctx, pool, "2026-W47")
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 75 || r.Stored.Token <= claim {
		t.Fatalf("after rebuild: total %d, token %d; want 75 and a claim token above the slot's %d", r.Total, r.Stored.Token, claim)
	}
	var fenced int64
	var holder string
	if err := pool.QueryRow(ctx, `SELECT token, holder FROM fencing_tokens WHERE resource = $1`, resource).Scan(&fenced, &holder); err != nil {
		t.Fatal(err)
	}
	var resources int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fencing_tokens`).Scan(&resources); err != nil {
		t.Fatal(err)
	}
	if fenced != r.Stored.Token || !strings.HasPrefix(holder, "report rebuild by operator@") || resources != 1 {
		t.Fatalf("fenced %s at token %d by %q, %d resources; want the rebuild's token %d by the rebuild, and no other resource",
			resource, fenced, holder, resources, r.Stored.Token)
	}

	// The slot's claimer, writing after the rebuild with its older claim, is refused.
	if err := job.Run(ctx, claimed()); !errors.Is(err, fencing.ErrStaleToken) || !strings.Contains(err.Error(), "report rebuild") {
		t.Fatalf("the slot's claimer after the rebuild: %v; want it refused because of the rebuild", err)
	}

	missing := snip(t, env, "report", "rebuild", "--config", path, "--week", "2026-W46")
	if missing.code != 1 || !strings.Contains(missing.stderr, "no stored report") {
		t.Fatalf("report rebuild of a week never stored: exit %d\n%s%s", missing.code, missing.stdout, missing.stderr)
	}
}
