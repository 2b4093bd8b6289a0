package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// Three instances, a shared etcd and database, one singleton that records
// (instance, token) through the fence every second: it runs on one instance at
// a time; status shows the leader and the last run; resign moves it; SIGTERM of
// the leader hands it over before the old lease could have expired, and the old
// process exits 0 having resigned.
func TestThreeInstancesRunASingletonOnOneAndHandOverOnResignAndSIGTERM(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcdClient(t, etcd.Endpoint(0))
	url := benchtest.PostgresDB(t)
	// A 10 s lease: a successor that waited for expiry would be easy to tell
	// from one that was handed the job.
	slow := "ttl: 10s\n  margin: 3s"
	mk := func(name string) config {
		return config{instance: name, endpoints: []string{etcd.Endpoint(0)}, ttl: slow, jobs: pulseJob}
	}
	env := dbEnv(migrate(t, writeConfig(t, mk("migrator")), url))
	if r := snip(t, env, "migrate", "--status", "--config", writeConfig(t, mk("migrator"))); r.code != 0 || !strings.Contains(r.stdout, "0 pending") {
		t.Fatalf("migrate --status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	procs := map[string]*instance{}
	for _, name := range []string{"server-a", "server-b", "server-c"} {
		procs[name] = start(t, mk(name), env)
	}
	for _, p := range procs {
		p.waitReady()
	}
	waitPulses(t, url, "three pulses", func() bool { return len(pulses(t, url)) >= 3 })

	// One leader, named in etcd, and only its token in the rows so far.
	first := leaderOf(t, observer, "pulse", 0)
	owners := checkPulses(t, pulses(t, url))
	if len(owners) != 1 || owners[first.Token] != first.Instance {
		t.Fatalf("rows by token %v; want only token %d of %s, the leader in etcd", owners, first.Token, first.Instance)
	}
	leader := procs[first.Instance]
	if code, body := leader.get("/metrics"); code != http.StatusOK || !strings.Contains(body, `snip_jobs_leader{job="pulse"} 1`) {
		t.Errorf("/metrics of the leader: %d, want snip_jobs_leader{job=\"pulse\"} 1 in:\n%s", code, body)
	}
	// The others say 0 though they never led it: the alert "nobody leads
	// pulse" (every instance's 0) needs the series before any term.
	for name, p := range procs {
		if name == first.Instance {
			continue
		}
		if code, body := p.get("/metrics"); code != http.StatusOK || !strings.Contains(body, `snip_jobs_leader{job="pulse"} 0`) ||
			!strings.Contains(body, `snip_jobs_term_starts_total{job="pulse"} 0`) {
			t.Errorf("/metrics of %s, which never led pulse: %d, want snip_jobs_leader{job=\"pulse\"} 0 and no term started in:\n%s", name, code, body)
		}
	}
	var st struct {
		Instance string `json:"instance"`
		Ready    bool   `json:"ready"`
		Lease    struct {
			ID string `json:"id"`
		} `json:"lease"`
		Jobs []struct {
			Job     string `json:"job"`
			Leading bool   `json:"leading"`
			Token   int64  `json:"token"`
		} `json:"jobs"`
	}
	if code, body := leader.get("/status"); code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil ||
		st.Instance != first.Instance || !st.Ready || st.Lease.ID == "" || len(st.Jobs) != 1 || !st.Jobs[0].Leading || st.Jobs[0].Token != first.Token {
		t.Errorf("/status of the leader: %d\n%s", code, body)
	}

	// status, from outside, shows the leader and the last run.
	var cs status.Cluster
	eventually(t, "status to show the leader's last run", func() bool {
		r := snip(t, env, "status", "--json", "--config", leader.config)
		if r.code != 0 {
			t.Fatalf("status --json: exit %d\n%s", r.code, r.stderr)
		}
		if err := json.Unmarshal([]byte(r.stdout), &cs); err != nil {
			t.Fatalf("status --json: %v\n%s", err, r.stdout)
		}
		j := cs.Jobs[0]
		return j.LastRun != nil && j.LastRun.Result == "ok" && j.LastRun.Token == first.Token
	})
	j := cs.Jobs[0]
	if j.Name != "pulse" || j.Mode != "leader" || j.Leader == nil || j.Leader.Instance != first.Instance ||
		j.Leader.Token != first.Token || j.Leader.LeaseTTLSeconds <= 0 || j.LastRun.Instance != first.Instance || len(cs.Instances) != 3 {
		t.Errorf("status --json: %+v", cs)
	}
	for _, in := range cs.Instances {
		if in.LeaseGrantedSeconds != 10 || in.LeaseTTLSeconds <= 0 || in.LeaseTTLSeconds > in.LeaseGrantedSeconds {
			t.Errorf("status --json: instance %s's lease %gs left of %gs; want a live lease of 10s", in.Name, in.LeaseTTLSeconds, in.LeaseGrantedSeconds)
		}
	}
	// The table's RESULT is the last run's: "ok", or "running" if the next
	// pulse (every second) has begun since the JSON above.
	r := snip(t, env, "status", "--config", leader.config)
	if rows := linesWith(r.stdout, "pulse", "leader", first.Instance, fmt.Sprint(first.Token)); r.code != 0 || len(rows) != 1 ||
		!strings.Contains(rows[0], " ok ") && !strings.Contains(rows[0], " running ") ||
		strings.Count(r.stdout, "s left of 10s)") != 3 {
		t.Errorf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// resign moves the job to another instance.
	r = snip(t, env, "resign", "pulse", "--config", leader.config)
	if r.code != 0 {
		t.Fatalf("resign: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	second := leaderOf(t, observer, "pulse", first.Token)
	if second.Instance == first.Instance {
		t.Fatalf("after resign %s still leads (token %d → %d)", first.Instance, first.Token, second.Token)
	}
	if !strings.Contains(r.stdout, "leader was "+first.Instance) || !strings.Contains(r.stdout, "now "+second.Instance) {
		t.Errorf("resign output:\n%s", r.stdout)
	}
	waitPulses(t, url, "a pulse of the second term", func() bool { return checkPulses(t, pulses(t, url))[second.Token] != "" })

	// SIGTERM: the successor starts before the old lease could have expired.
	ctx := context.Background()
	ttl, err := observer.TimeToLive(ctx, second.Lease)
	if err != nil {
		t.Fatal(err)
	}
	expiresBy := time.Now().Add(time.Duration(ttl.TTL) * time.Second) // had it not been revoked
	old := procs[second.Instance]
	old.signal(syscall.SIGTERM)
	third := leaderOf(t, observer, "pulse", second.Token)
	if code := old.wait(); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM, want 0", old.name, code)
	}
	if !third.Since.Before(expiresBy) {
		t.Errorf("successor %s won at %v, not before the old lease would have expired (%v)", third.Instance, third.Since, expiresBy)
	}
	if third.Instance == second.Instance {
		t.Errorf("the stopped instance %s leads again", third.Instance)
	}
	if ttl, err := observer.TimeToLive(ctx, second.Lease); err != nil || ttl.TTL != -1 {
		t.Errorf("the stopped instance's lease: %v, %v; want it revoked", ttl, err)
	}
	logs := old.logs()
	if len(linesWith(logs, `"msg":"term over"`, `"why":"shutdown"`, fmt.Sprintf(`"token":%d`, second.Token))) != 1 ||
		strings.Contains(logs, "resign failed") || !strings.Contains(logs, "stopped cleanly") {
		t.Errorf("%s did not resign its term at shutdown:\n%s", old.name, logs)
	}
	waitPulses(t, url, "a pulse of the third term", func() bool { return checkPulses(t, pulses(t, url))[third.Token] != "" })

	owners = checkPulses(t, pulses(t, url))
	for token, who := range owners {
		if token != first.Token && token != second.Token && token != third.Token {
			t.Errorf("rows with token %d of %s, which etcd never showed as leader", token, who)
		}
	}
	for _, p := range procs {
		if strings.Contains(p.logs(), "postgres://") {
			t.Errorf("%s logged the database URL", p.name)
		}
	}
}

// SIGKILL: no resign, no revoke; a successor takes over only once the killed
// leader's lease has expired.
func TestKilledLeaderIsReplacedAfterItsLeaseExpires(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcdClient(t, etcd.Endpoint(0))
	url := benchtest.PostgresDB(t)
	mk := func(name string) config {
		return config{instance: name, endpoints: []string{etcd.Endpoint(0)}, jobs: pulseJob}
	}
	env := dbEnv(migrate(t, writeConfig(t, mk("migrator")), url))
	procs := map[string]*instance{}
	for _, name := range []string{"server-a", "server-b", "server-c"} {
		procs[name] = start(t, mk(name), env)
	}
	for _, p := range procs {
		p.waitReady()
	}
	first := leaderOf(t, observer, "pulse", 0)
	waitPulses(t, url, "a pulse", func() bool { return checkPulses(t, pulses(t, url))[first.Token] != "" })

	killed := procs[first.Instance]
	killed.signal(syscall.SIGKILL)
	if code := killed.wait(); code != -1 {
		t.Fatalf("%s exit status %d after SIGKILL", killed.name, code)
	}
	second := leaderOf(t, observer, "pulse", first.Token)
	if ttl, err := observer.TimeToLive(context.Background(), first.Lease); err != nil || ttl.TTL != -1 {
		t.Fatalf("successor %s won while the killed leader's lease was still alive: %v, %v", second.Instance, ttl, err)
	}
	if second.Instance == first.Instance {
		t.Fatalf("the killed instance leads")
	}
	waitPulses(t, url, "a pulse of the successor", func() bool { return checkPulses(t, pulses(t, url))[second.Token] != "" })
	checkPulses(t, pulses(t, url))
}

func TestASecondProcessWithTheSameInstanceNameExits1(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	url := benchtest.PostgresDB(t)
	c := config{instance: "server-a", endpoints: []string{etcd.Endpoint(0)}, jobs: pulseJob}
	env := dbEnv(migrate(t, writeConfig(t, c), url))
	first := start(t, c, env)
	first.waitReady()

	second := start(t, c, env) // same name, another admin port
	if code := second.wait(); code != 1 {
		t.Fatalf("second server-a: exit %d, want 1\n%s", code, second.logs())
	}
	want := fmt.Sprintf(`snip-jobs run: leadership: instance "server-a" is already running on this host as pid %d`, first.proc.Pid())
	if !strings.Contains(second.logs(), want) {
		t.Errorf("second server-a's output lacks %q:\n%s", want, second.logs())
	}
	if code, _ := first.get("/readyz"); code != http.StatusOK || !first.running() {
		t.Errorf("the first server-a is no longer ready (%d)", code)
	}
}

// /readyz: 503 while the session has no lease or PostgreSQL does not answer,
// 200 when both are fine.
func TestReadyzFollowsTheEtcdLeaseAndPostgres(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	pg := benchtest.StartPostgres(t)
	url := pg.CreateDatabase(t)
	c := config{instance: "server-a", endpoints: []string{etcd.Endpoint(0)}, jobs: pulseJob}
	env := dbEnv(migrate(t, writeConfig(t, c), url))

	etcd.Stop(t, 0)
	in := start(t, c, env)
	eventually(t, "/healthz", func() bool { code, _ := in.get("/healthz"); return code == http.StatusOK })
	// The admin answers before the schema is compared (which /readyz says
	// until PostgreSQL has answered); then only etcd is missing.
	eventually(t, "/readyz without etcd to name etcd only", func() bool {
		code, body := in.get("/readyz")
		return code == http.StatusServiceUnavailable && body == "not ready: etcd: the session holds no lease (etcd unreachable, or not yet granted)\n"
	})

	etcd.Restart(t, 0)
	in.waitReady()
	eventually(t, "/metrics to show the term", func() bool {
		_, body := in.get("/metrics")
		return strings.Contains(body, `snip_jobs_leader{job="pulse"} 1`)
	})

	pg.Stop(t)
	eventually(t, "/readyz 503 without PostgreSQL", func() bool {
		code, body := in.get("/readyz")
		// One line, about PostgreSQL (its error may quote the database's name).
		return code == http.StatusServiceUnavailable && strings.HasPrefix(body, "not ready: postgres: ") && strings.Count(body, "\n") == 1
	})
	pg.Start(t)
	in.waitReady()

	in.signal(syscall.SIGTERM)
	if code := in.wait(); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}

// With no etcd endpoints, run starts an embedded etcd, says so, and runs
// singletons on it.
func TestRunWithoutEtcdEndpointsStartsAnEmbeddedEtcd(t *testing.T) {
	t.Parallel()
	url := benchtest.PostgresDB(t)
	c := config{instance: "solo", embeddedDir: filepath.Join(t.TempDir(), "etcd"), jobs: pulseJob}
	env := dbEnv(migrate(t, writeConfig(t, c), url))
	// Port 0: etcd picks a free port (and retries if it loses it), and the
	// warning says which.
	in := start(t, c, env, "--embedded-etcd-listen", "127.0.0.1:0")
	in.waitReady()
	lines := linesWith(in.logs(), `"level":"WARN"`, "embedded single-member etcd")
	if len(lines) != 1 {
		t.Fatalf("no warning about the embedded etcd:\n%s", in.logs())
	}
	var warning struct{ Endpoint string }
	if err := json.Unmarshal([]byte(lines[0]), &warning); err != nil || !strings.HasPrefix(warning.Endpoint, "http://127.0.0.1:") ||
		strings.HasSuffix(warning.Endpoint, ":0") {
		t.Fatalf("the warning names no endpoint (%v): %s", err, lines[0])
	}
	endpoint := warning.Endpoint
	l := leaderOf(t, etcdClient(t, endpoint), "pulse", 0)
	waitPulses(t, url, "a pulse", func() bool { return checkPulses(t, pulses(t, url))[l.Token] == "solo" })
	if _, err := os.Stat(filepath.Join(c.embeddedDir, "member")); err != nil {
		t.Errorf("embedded etcd data dir: %v", err)
	}
	r := snip(t, env, "status", "--json", "--config", in.config, "--endpoints", endpoint)
	var cs status.Cluster
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &cs) != nil || cs.Jobs[0].Leader == nil || cs.Jobs[0].Leader.Instance != "solo" {
		t.Errorf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	in.signal(syscall.SIGTERM)
	if code := in.wait(); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}

// Under systemd (Type=notify): READY=1 once the instance is ready, watchdog
// pings while it is healthy, STOPPING=1 at SIGTERM, and nothing after.
func TestRunTellsSystemdReadyWatchdogAndStopping(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	url := benchtest.PostgresDB(t)
	c := config{instance: "server-a", endpoints: []string{etcd.Endpoint(0)}, jobs: pulseJob}
	env := dbEnv(migrate(t, writeConfig(t, c), url))

	dir, err := os.MkdirTemp("", "sd") // a socket path must be short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	in := start(t, c, append(env, "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=1000000"))
	var mu sync.Mutex
	var got []string
	readyOK := make(chan bool, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			first, _, _ := strings.Cut(string(buf[:n]), "\n")
			if first == "READY=1" {
				code, _ := in.get("/readyz")
				readyOK <- code == http.StatusOK
			}
			mu.Lock()
			got = append(got, first)
			mu.Unlock()
		}
	}()
	seen := func(msg string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range got {
				if m == msg {
					return true
				}
			}
			return false
		}
	}
	eventually(t, "WATCHDOG=1", seen("WATCHDOG=1"))
	in.signal(syscall.SIGTERM)
	if code := in.wait(); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	eventually(t, "STOPPING=1", seen("STOPPING=1"))
	if !<-readyOK {
		t.Error("READY=1 was sent while /readyz was not 200")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 3 || got[0] != "READY=1" || got[len(got)-1] != "STOPPING=1" {
		t.Fatalf("notifications %v: want READY=1 first, then watchdog pings, STOPPING=1 last", got)
	}
	for _, m := range got[1 : len(got)-1] {
		if m != "WATCHDOG=1" && !strings.HasPrefix(m, "STATUS=") {
			t.Errorf("unexpected notification %q in %v", m, got)
		}
	}
}

// A secret file the config names that its group or others may read stops run
// at start (exit 1), naming each file, its setting, its mode and the flag;
// with --allow-readable-secrets run starts and warns about each instead.
func TestRunRefusesSecretFilesOthersCanReadUnlessAllowed(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "database-url")
	keyFile := filepath.Join(dir, "certificate-keys")
	for path, content := range map[string]string{urlFile: url, keyFile: "MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(urlFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keyFile, 0o640); err != nil {
		t.Fatal(err)
	}
	refused := writeConfig(t, config{instance: "server-1", endpoints: []string{"https://127.0.0.1:1"}, adminPort: freePort(t), urlFile: urlFile,
		jobs: strings.Replace(certsJobYAML, "key_env: SNIP_TEST_CERT_KEY", "key_file: "+keyFile, 1)})
	r := snip(t, nil, "run", "--config", refused)
	for _, want := range []string{
		"secret files must be readable by their owner only",
		"postgres.url_file " + urlFile + " is readable by its group and others (mode 0644): chmod go-rwx " + urlFile,
		`job "cert-renewer": options.key_file ` + keyFile + " is readable by its group (mode 0640)",
		"--allow-readable-secrets",
	} {
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("run with readable secret files: exit %d, want 1 and %q in:\n%s", r.code, want, r.stderr)
		}
	}

	everywhere := "\n  - name: noop\n    type: sql\n    singleton: false\n    every: 1h\n    options: {statement: SELECT 1}\n"
	in := start(t, config{instance: "server-2", endpoints: []string{"https://127.0.0.1:1"}, urlFile: urlFile, jobs: everywhere}, nil, "--allow-readable-secrets")
	in.waitReady()
	if lines := linesWith(in.logs(), "secret file readable by other users", urlFile); len(lines) != 1 {
		t.Errorf("want one warning naming %s; logs:\n%s", urlFile, in.logs())
	}
	in.signal(syscall.SIGTERM)
	if code := in.wait(); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
}

// run as the runtime role of docs/operations.md checks its grants at start: a
// missing one stops it (exit 1) before any job runs, naming the table.
func TestRunRefusesToStartWithoutAGrantItNeedsNamingTheTable(t *testing.T) {
	t.Parallel()
	url := benchtest.PostgresDB(t)
	c := config{instance: "server-a", endpoints: []string{"https://127.0.0.1:1"}, jobs: pulseJob}
	runtime := migrate(t, writeConfig(t, c), url)
	dbtest.Exec(t, url, "REVOKE INSERT ON job_runs FROM "+dbtest.RuntimeRole+"; REVOKE SELECT ON custom_domains FROM "+dbtest.RuntimeRole)
	r := snip(t, dbEnv(runtime), "run", "--config", writeConfig(t, c))
	want := "the database role lacks privileges this binary needs: INSERT on job_runs, SELECT on custom_domains; " +
		"grant them with `snip-jobs migrate --grant-to ROLE` run as the schema's owner"
	if r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("run without two grants: exit %d, want 1 and %q in:\n%s", r.code, want, r.stderr)
	}
	if n := benchtest.Value[int64](t, dbtest.Pool(t, url), `SELECT count(*) FROM job_runs`); n != 0 {
		t.Errorf("%d runs were recorded; want none before the check", n)
	}
}
