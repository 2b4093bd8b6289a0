package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/app/admin"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }

// eventually polls cond until it holds (benchtest.Eventually).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	benchtest.Eventually(t, what, cond)
}

func get(t *testing.T, s *admin.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.Addr().String() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func session(t *testing.T, etcd *etcdtest.Cluster, instance string) *leadership.Session {
	t.Helper()
	s, err := etcdlease.NewSession(etcdlease.Config{Client: etcd.Client(t), Config: leadership.Config{Instance: instance, TTL: 2 * time.Second, Margin: 500 * time.Millisecond, RenewInterval: 400 * time.Millisecond, Logger: benchtest.Logger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func pool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func serve(t *testing.T, cfg admin.Config) *admin.Server {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.NewRegistry()
	}
	cfg.Log = benchtest.Logger(t)
	s, err := admin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

func TestReadyzNeedsALeaseAndAPostgresPingAndNamesWhatIsMissing(t *testing.T) {
	etcd := etcdtest.Start(t, 1)
	pg := benchtest.StartPostgres(t)
	etcd.Stop(t, 0)
	s := serve(t, admin.Config{Instance: "server-a", Session: session(t, etcd, "server-a"), DB: pool(t, pg.URL("postgres"))})

	if code, body := get(t, s, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %q", code, body)
	}
	code, body := get(t, s, "/readyz")
	if code != http.StatusServiceUnavailable || body != "not ready: etcd: the session holds no lease (etcd unreachable, or not yet granted)\n" {
		t.Errorf("/readyz before a lease: %d %q", code, body)
	}

	etcd.Restart(t, 0)
	eventually(t, "/readyz 200 once the session holds a lease", func() bool {
		code, body := get(t, s, "/readyz")
		return code == http.StatusOK && body == "ready\n"
	})

	pg.Stop(t)
	code, body = get(t, s, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready: postgres: no answer to a ping within") || strings.Contains(body, "not ready: etcd") {
		t.Errorf("/readyz with PostgreSQL down: %d %q", code, body)
	}
	pg.Start(t)
	if code, body := get(t, s, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz with PostgreSQL back: %d %q", code, body)
	}

	s.Stopping()
	if code, body := get(t, s, "/readyz"); code != http.StatusServiceUnavailable || body != "not ready: shutting down\n" {
		t.Errorf("/readyz while stopping: %d %q", code, body)
	}
	if code, _ := get(t, s, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while stopping: %d, want 200 (the process still runs)", code)
	}
}

// A further readiness check (the run command's schema comparison) holds
// /readyz at 503 under its own name while it fails, after the database's line.
func TestReadyzNamesAFailingFurtherCheckAfterTheDatabase(t *testing.T) {
	var pending atomic.Bool
	pending.Store(true)
	s := serve(t, admin.Config{Instance: "server-a", DB: pool(t, benchtest.PostgresDB(t)), Checks: []admin.Check{{
		Name: "schema",
		Err: func(context.Context) error {
			if pending.Load() {
				return errors.New("not yet compared with this binary's migrations")
			}
			return nil
		},
	}}})
	if code, body := get(t, s, "/readyz"); code != http.StatusServiceUnavailable || body != "not ready: schema: not yet compared with this binary's migrations\n" {
		t.Errorf("/readyz with the check failing: %d %q", code, body)
	}
	pending.Store(false)
	if code, body := get(t, s, "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz with the check passing: %d %q", code, body)
	}
	if _, err := admin.New(admin.Config{Listen: "127.0.0.1:0", Gatherer: prometheus.NewRegistry(), Checks: []admin.Check{{Name: "x"}}}); err == nil {
		t.Error("a check without Err was accepted")
	}
}

// A config that needs no etcd gives no session: readiness is PostgreSQL alone.
func TestReadyzWithoutASessionChecksOnlyPostgres(t *testing.T) {
	s := serve(t, admin.Config{Instance: "server-a", DB: pool(t, benchtest.PostgresDB(t))})
	if code, body := get(t, s, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %q", code, body)
	}
	var st admin.Status
	_, body := get(t, s, "/status")
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Lease != nil || !st.Ready || st.Jobs == nil {
		t.Errorf("/status without a session: %v %s", err, body)
	}
}

func TestStatusAndMetricsShowTheSchedulersTermsOnTheSharedMux(t *testing.T) {
	etcd := etcdtest.Start(t, 1)
	url := dbtest.URL(t)
	reg, err := scheduler.NewRegistry(scheduler.Type{
		Name: "tick",
		New: func(env scheduler.Env, _ configs.Job) (scheduler.Job, error) {
			// A job type adds its own route to the admin listener.
			env.Mux.HandleFunc("GET /tick", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "tock") })
			return scheduler.JobFunc(func(context.Context, *scheduler.Run) error { return nil }), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	file, err := configs.Parse("test.yaml", []byte("instance: server-a\njobs:\n  - name: tick\n    type: tick\n    every: 1s\n"), reg)
	if err != nil {
		t.Fatal(err)
	}
	sess := session(t, etcd, "server-a")
	db := pool(t, url)
	metrics := prometheus.NewRegistry()
	mux := http.NewServeMux()
	sched, err := scheduler.New(scheduler.Config{File: file, Registry: reg, Session: scheduler.Over(sess), Pool: db, Metrics: metrics, Mux: mux, Log: benchtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = sched.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	s := serve(t, admin.Config{Mux: mux, Gatherer: metrics, Instance: "server-a", Version: "v-test", Session: sess, DB: db, Jobs: sched})
	var st admin.Status
	eventually(t, "/status to be ready and show the term", func() bool {
		code, body := get(t, s, "/status")
		if code != http.StatusOK {
			t.Fatalf("/status: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("/status: %v\n%s", err, body)
		}
		return st.Ready && len(st.Jobs) == 1 && st.Jobs[0].Leading && st.Jobs[0].LastRun != nil
	})
	stats := sess.Stats()
	if st.Instance != "server-a" || st.Version != "v-test" || !st.Ready || st.Lease == nil || st.Lease.ID == "" ||
		st.Lease.LeasesGranted < 1 || st.Lease.HeadroomSeconds <= 0 || st.Jobs[0].Name != "tick" || st.Jobs[0].Token <= 0 {
		t.Errorf("/status: %+v (lease %+v), session stats %+v", st, st.Lease, stats)
	}
	code, body := get(t, s, "/metrics")
	for _, want := range []string{`snip_jobs_leader{job="tick"} 1`, "snip_jobs_lease_up 1"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics serves collectors that were not registered on the process's registry")
	}
	if code, body := get(t, s, "/tick"); code != http.StatusOK || body != "tock" {
		t.Errorf("a job type's route: %d %q", code, body)
	}
}

func TestARouteThatAJobTypeAlreadyTookIsAnError(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(http.ResponseWriter, *http.Request) {})
	_, err := admin.New(admin.Config{Listen: "127.0.0.1:0", Mux: mux, Gatherer: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), "/status") {
		t.Fatalf("err = %v, want a conflict naming /status", err)
	}
}

func TestAnAddressInUseIsAStartError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := admin.New(admin.Config{Listen: l.Addr().String(), Gatherer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("Start on a taken port: %v", err)
	}
}

func TestShutdownLetsARequestInFlightFinish(t *testing.T) {
	mux := http.NewServeMux()
	entered, release := make(chan struct{}), make(chan struct{})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "done")
	})
	s := serve(t, admin.Config{Mux: mux})
	addr := s.Addr().String()

	answered := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			answered <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- string(b)
	}()
	<-entered
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	eventually(t, "the listener to close", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a request was in flight", err)
	default:
	}
	close(release)
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := <-answered; got != "done" {
		t.Fatalf("the request in flight got %q", got)
	}
}

func TestTheStatusPageIsMountedUnderStatusAndTheRootRedirectsToIt(t *testing.T) {
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page at "+r.URL.Path) })
	s := serve(t, admin.Config{Page: page})
	for path, want := range map[string]string{"/": "page at /status/", "/status/": "page at /status/", "/status/live": "page at /status/live"} {
		if code, body := get(t, s, path); code != http.StatusOK || body != want {
			t.Errorf("GET %s: %d %q, want 200 %q", path, code, body, want)
		}
	}
	if code, body := get(t, s, "/status"); code != http.StatusOK || !strings.HasPrefix(body, "{") {
		t.Errorf("GET /status: %d %q; want the JSON status, not the page", code, body)
	}
	plain := serve(t, admin.Config{})
	if code, _ := get(t, plain, "/"); code != http.StatusNotFound {
		t.Errorf("GET / without a page: %d, want 404", code)
	}
}
