package devcluster

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }

// The demo runs the jobs whose type the binary has; the others join it by
// being registered, with no change here.
func TestTheDemoHasTheJobsWhoseTypesAreBuiltInAndItsConfigIsValid(t *testing.T) {
	types, err := scheduler.NewRegistry(weeklyreport.Type())
	if err != nil {
		t.Fatal(err)
	}
	jobs := selectDemoJobs(types, nil)
	if len(jobs) != 1 || jobs[0].Name != "weekly-report" {
		t.Fatalf("demo jobs %+v; want weekly-report only (sql, aggregator and certrenew are not in this registry)", jobs)
	}
	path := filepath.Join(t.TempDir(), "server-1.yaml")
	text, err := instanceConfig{Instance: "server-1", Backend: etcdSection("http://127.0.0.1:2379"), URLFile: "/tmp/database-url",
		TTL: 5 * time.Second, Listen: "127.0.0.1:9471", Jobs: jobs, ShutdownIn: childShutdown}.render(types, path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse(path, text, types)
	if err != nil {
		t.Fatal(err)
	}
	if f.Instance != "server-1" || f.Leadership.TTL != 5*time.Second || f.Leadership.Margin != 1500*time.Millisecond ||
		f.Postgres.URLFile != "/tmp/database-url" || len(f.Jobs) != 1 || f.Jobs[0].Schedule.Cron != "* * * * *" {
		t.Errorf("config: %+v\n%s", f, text)
	}
	if !strings.Contains(string(text), "removed when dev stops") {
		t.Errorf("the config does not say where it comes from:\n%s", text)
	}
}

// With --backend kubernetes the instances' configs have a kubernetes
// section and leadership.backend: kubernetes, and no etcd section.
func TestTheDemoConfigOnKubernetesIsValid(t *testing.T) {
	types, err := scheduler.NewRegistry(weeklyreport.Type())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	token := filepath.Join(dir, "kube-token")
	if err := os.WriteFile(token, []byte("t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "server-1.yaml")
	text, err := instanceConfig{Instance: "server-1", Backend: kubeSection("https://127.0.0.1:6443", token, ""),
		LeadershipBackend: "backend: kubernetes", URLFile: "/tmp/database-url", TTL: 5 * time.Second, Listen: "127.0.0.1:9471",
		Jobs: selectDemoJobs(types, nil), ShutdownIn: childShutdown}.render(types, path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse(path, text, types)
	if err != nil {
		t.Fatal(err)
	}
	if f.Leadership.Backend != configs.BackendKubernetes || f.Kubernetes.Server != "https://127.0.0.1:6443" || f.Kubernetes.TokenFile != token ||
		f.Kubernetes.Namespace != kubeNamespace || f.Kubernetes.Prefix != kubePrefix || f.Leadership.TTL != 5*time.Second {
		t.Errorf("config: %+v\n%s", f, text)
	}
}

// Once startCA returns a CA, the renewer's entry joins the demo with options
// the certrenew type accepts.
func TestTheRenewersEntryIsValidOnceThereIsATestCA(t *testing.T) {
	types, err := scheduler.NewRegistry(certrenew.Type(), weeklyreport.Type())
	if err != nil {
		t.Fatal(err)
	}
	if jobs := selectDemoJobs(types, nil); len(jobs) != 1 || jobs[0].Name != "weekly-report" {
		t.Fatalf("without a CA the demo has %+v; want the renewer left out", jobs)
	}
	ca := &acmeCA{Directory: "https://127.0.0.1:14000/dir", RootsFile: "/tmp/dev/acme-roots.pem", KeyFile: "/tmp/dev/sealing-key"}
	jobs := selectDemoJobs(types, ca)
	if len(jobs) != 2 || jobs[1].Name != "cert-renewer" {
		t.Fatalf("with a CA the demo has %+v; want weekly-report and cert-renewer", jobs)
	}
	path := filepath.Join(t.TempDir(), "server-2.yaml")
	text, err := instanceConfig{Instance: "server-2", Backend: etcdSection("http://127.0.0.1:2379"), URLFile: "/tmp/database-url",
		TTL: 5 * time.Second, Listen: "127.0.0.1:9472", Jobs: jobs, ShutdownIn: childShutdown,
		Env: demoEnv{CA: ca, Challenge: "127.0.0.1:5002"}}.render(types, path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse(path, text, types)
	if err != nil {
		t.Fatal(err)
	}
	o, err := configs.DecodeOptions(f.Jobs[1], certrenew.DefaultOptions)
	if err != nil || o.Directory != ca.Directory || o.CARootsFile != ca.RootsFile || o.KeyFile != ca.KeyFile || o.ChallengeListen != "127.0.0.1:5002" {
		t.Errorf("the renewer's options: %+v (%v)", o, err)
	}
}

// The stream of clicks goes where it will be counted: into click_events for
// the aggregator when there is one, straight into the counts otherwise. The
// seeded history gives the weekly report a week and the week before.
func TestTheDemoDataAndTheClickStreamLandInTheRealSchema(t *testing.T) {
	ctx := context.Background()
	_, pool := dbtest.New(t)
	domains, err := seed(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seed(ctx, pool); err != nil {
		t.Fatalf("seeding twice: %v", err)
	}
	hasDomains, err := tableExists(ctx, pool, "custom_domains")
	if err != nil {
		t.Fatal(err)
	}
	if hasDomains != (domains == len(demoDomains)) {
		t.Errorf("%d demo domains inserted; custom_domains exists: %v", domains, hasDomains)
	}
	count := func(sql string) int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	if days := count(`SELECT count(DISTINCT date_trunc('day', hour)) FROM link_hourly_counts WHERE link_id = 1`); days < 14 {
		t.Errorf("the viral link has counts on %d days, want two weeks", days)
	}

	total := `SELECT clicks FROM link_counts WHERE link_id = 1`
	thisHour := `SELECT coalesce(sum(clicks), 0) FROM link_hourly_counts WHERE link_id = 1 AND hour = date_bin('1 hour', now(), '2000-01-01 00:00:00+00')`
	before, beforeHour := count(total), count(thisHour)
	direct := &feeder{pool: pool, log: slog.New(slog.DiscardHandler)}
	if err := direct.insert(ctx, 40, 2); err != nil {
		t.Fatal(err)
	}
	if got := count(total); got != before+40 {
		t.Errorf("link 1's total %d after 40 direct clicks, want %d", got, before+40)
	}
	if got := count(thisHour); got != beforeHour+40 {
		t.Errorf("link 1's clicks this hour %d, want %d", got, beforeHour+40)
	}

	if ok, err := tableExists(ctx, pool, "click_events"); err != nil || !ok {
		return // the aggregator's schema is not in this tree: nothing goes to click_events
	}
	events := &feeder{pool: pool, events: true, log: slog.New(slog.DiscardHandler)}
	if err := events.insert(ctx, 40, 3); err != nil {
		t.Fatal(err)
	}
	if n := count(`SELECT count(*) FROM click_events WHERE link_id = 1 AND defect IS NULL`); n != 40 {
		t.Errorf("%d valid click events on link 1, want 40", n)
	}
	if n := count(`SELECT count(*) FROM click_events WHERE link_id = 3`); n != 1 {
		t.Errorf("%d click events on link 3, want 1", n)
	}
}
