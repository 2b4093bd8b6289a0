package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/childproc"
	"github.com/snip/snip-jobs/testbench/clitest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// binary is snip-jobs, built once by TestMain; the tests drive it as a process,
// the way systemd and operators do.
var binary string

func TestMain(m *testing.M) {
	benchtest.MostlyWaiting(4) // processes starting, leases expiring, a container booting
	os.Exit(clitest.Main(m, clitest.Binary{Pkg: ".", Name: "snip-jobs", Path: &binary}))
}

// waitLong bounds waiting on processes: how long a broken setup takes to
// fail, never whether a working one passes.
const waitLong = benchtest.Patience

// eventually polls cond until it holds (benchtest.Eventually).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	benchtest.Eventually(t, what, cond)
}

// waitPulses waits until cond holds, woken by each commit to the pulses
// table in the database at url (dbtest.WaitCommit), not by polling. The
// pulses are fenced writes, which the fence's row lock already serialises, so
// the trigger's NOTIFY orders no commit that was not ordered.
func waitPulses(t *testing.T, url, what string, cond func() bool) {
	t.Helper()
	dbtest.WaitCommit(t, url, what, []string{"pulses"}, cond)
}

// result is a finished command.
type result struct {
	code           int
	stdout, stderr string
}

// snip runs the binary to completion with extra environment variables.
func snip(t testing.TB, env []string, args ...string) result {
	t.Helper()
	r := clitest.Run(t, binary, env, args...)
	return result{code: r.Code, stdout: r.Stdout, stderr: r.Stderr}
}

// baseEnv is the test's environment without the variables snip-jobs reads.
func baseEnv() []string { return childproc.Env() }

func dbEnv(url string) []string { return []string{"SNIP_JOBS_DATABASE_URL=" + url} }

// freePort returns a port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

const testPrefix = "/snip-jobs-test"

// config describes a test config file.
type config struct {
	instance    string
	endpoints   []string // nil: embedded etcd in embeddedDir
	embeddedDir string
	adminPort   int              // http.listen's port; 0: a port the test holds, passed as the "admin" socket
	passed      []sockact.Socket // more sockets to pass (an "admin" one here makes in.admin its address)
	ttl         string           // leadership block, e.g. "ttl: 2s\n  margin: 500ms"
	urlFile     string           // postgres.url_file; "": url_env SNIP_JOBS_DATABASE_URL
	jobs        string           // the jobs list, YAML
	// etcd: TLS files (ca, cert, key), a user and its password file, and
	// dial_timeout, each left out when empty.
	tlsCA, tlsCert, tlsKey string
	user, passwordFile     string
	dialTimeout            string
	// kube, when set, is the kubernetes section's body (lines indented by
	// two): leadership.backend: kubernetes, and no etcd section.
	kube string
}

// pulseJob is a singleton sql job that records every run as (instance, token)
// through the fence.
const pulseJob = `
  - name: pulse
    type: sql
    singleton: true
    every: 1s
    grace: 2s
    options:
      statement: INSERT INTO pulses (instance, token) VALUES (@instance, @token)
`

const pulsesTable = `CREATE TABLE pulses (id bigserial PRIMARY KEY, instance text NOT NULL, token bigint NOT NULL)`

func writeConfig(t testing.TB, c config) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "instance: %s\n", c.instance)
	if c.ttl == "" {
		c.ttl = "ttl: 2s\n  margin: 500ms\n  renew_interval: 400ms"
	}
	if c.kube != "" {
		fmt.Fprintf(&b, "kubernetes:\n%s\n", strings.TrimRight(c.kube, "\n"))
		c.ttl = "backend: kubernetes\n  " + c.ttl
	} else {
		writeEtcd(&b, c)
	}
	if c.urlFile != "" {
		fmt.Fprintf(&b, "postgres:\n  url_file: %s\n", c.urlFile)
	} else {
		b.WriteString("postgres:\n  url_env: SNIP_JOBS_DATABASE_URL\n")
	}
	fmt.Fprintf(&b, "leadership:\n  %s\n", c.ttl)
	fmt.Fprintf(&b, "http:\n  listen: 127.0.0.1:%d\n", c.adminPort)
	b.WriteString("log:\n  format: json\n  level: info\n")
	b.WriteString("shutdown_timeout: 15s\n")
	b.WriteString("jobs:")
	if strings.TrimSpace(c.jobs) == "" {
		b.WriteString(" []\n")
	} else {
		b.WriteString(c.jobs)
	}
	path := filepath.Join(t.TempDir(), c.instance+".yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeEtcd writes the etcd section of c.
func writeEtcd(b *strings.Builder, c config) {
	b.WriteString("etcd:\n")
	if c.endpoints != nil {
		fmt.Fprintf(b, "  endpoints: [%s]\n", strings.Join(c.endpoints, ", "))
	} else {
		fmt.Fprintf(b, "  embedded_dir: %s\n", c.embeddedDir)
	}
	fmt.Fprintf(b, "  prefix: %s\n", testPrefix)
	if c.dialTimeout != "" {
		fmt.Fprintf(b, "  dial_timeout: %s\n", c.dialTimeout)
	}
	if c.tlsCA != "" || c.tlsCert != "" {
		fmt.Fprintf(b, "  tls:\n    ca: %s\n    cert: %s\n    key: %s\n", c.tlsCA, c.tlsCert, c.tlsKey)
	}
	if c.user != "" {
		fmt.Fprintf(b, "  auth:\n    user: %s\n    password_file: %s\n", c.user, c.passwordFile)
	}
}

// instance is a `snip-jobs run` process.
type instance struct {
	t      testing.TB
	name   string
	config string
	admin  string // http://127.0.0.1:port
	proc   *childproc.Proc
	out    string // file holding its stderr (the logs) and stdout
	exited <-chan struct{}
}

// start starts `snip-jobs run` for the config c, and stops it (SIGKILL) at the
// end of the test if it still runs; its logs are shown when the test failed.
func start(t testing.TB, c config, env []string, args ...string) *instance {
	t.Helper()
	// The admin socket is the test's, passed as systemd would: held for the
	// whole test, so no other process can take the port before the instance
	// serves it (picking a free port and letting the child bind it lost that
	// race in CI).
	socks := c.passed
	if c.adminPort == 0 {
		ln := benchtest.Listen(t)
		c.adminPort = ln.Addr().(*net.TCPAddr).Port
		socks = append(socks, sockact.Socket{Name: "admin", Listener: ln})
	}
	adminAddr := fmt.Sprintf("127.0.0.1:%d", c.adminPort)
	for _, s := range socks {
		if s.Name == "admin" {
			adminAddr = s.Listener.Addr().String()
		}
	}
	path := writeConfig(t, c)
	in := &instance{
		t: t, name: c.instance, config: path,
		admin: "http://" + adminAddr,
		out:   filepath.Join(t.TempDir(), c.instance+".log"),
	}
	// The instance dies with the test binary, however that ends (a panic, the
	// -timeout alarm, SIGKILL): no instance outlives the test that started it
	// (childproc's parent-death signal).
	proc, err := childproc.Start(childproc.Spec{
		Path: binary, Args: append([]string{"run", "--config", path}, args...),
		Env: env, Log: in.out, Sockets: socks,
	})
	if err != nil {
		t.Fatal(err)
	}
	in.proc, in.exited = proc, proc.Done()
	t.Cleanup(func() {
		proc.Kill()
		if t.Failed() {
			t.Logf("--- logs of %s ---\n%s", in.name, in.logs())
		}
	})
	return in
}

func (in *instance) running() bool {
	select {
	case <-in.exited:
		return false
	default:
		return true
	}
}

func (in *instance) logs() string {
	b, _ := os.ReadFile(in.out)
	return string(b)
}

func (in *instance) signal(sig syscall.Signal) {
	in.t.Helper()
	if err := in.proc.Signal(sig); err != nil {
		in.t.Fatalf("signal %s: %v", in.name, err)
	}
}

// wait waits for the process to exit and returns its exit status (-1 when a
// signal killed it).
func (in *instance) wait() int {
	in.t.Helper()
	select {
	case <-in.exited:
	case <-time.After(waitLong):
		in.t.Fatalf("%s did not exit", in.name)
	}
	return in.proc.ExitCode()
}

// state is how the process exited ("exit status 1", "signal: killed"), or
// that it runs.
func (in *instance) state() string {
	switch err := in.proc.Err(); {
	case in.running():
		return "running"
	case err == nil:
		return "exit status 0"
	default:
		return err.Error()
	}
}

// get fetches a path of the admin server: status code and body (0 when it
// does not answer).
func (in *instance) get(path string) (int, string) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(in.admin + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (in *instance) waitReady() {
	in.t.Helper()
	eventually(in.t, in.name+" ready", func() bool {
		if !in.running() {
			in.t.Fatalf("%s exited with %v before it was ready", in.name, in.state())
		}
		code, _ := in.get("/readyz")
		return code == http.StatusOK
	})
}

// migrate sets up the empty database at url (a superuser's) as
// docs/operations.md says: the two roles (dbtest.Roles), the schema applied
// with `snip-jobs migrate --grant-to snip_jobs` as the owner, and the pulses
// table, the sql jobs' own, granted to the runtime role by its owner. It
// returns the URL of the runtime role, which the commands under test use;
// the test's fixtures and checks keep url.
func migrate(t testing.TB, configPath, url string) (runtime string) {
	t.Helper()
	owner, runtime := dbtest.Roles(t, url)
	r := snip(t, dbEnv(owner), "migrate", "--grant-to", dbtest.RuntimeRole, "--config", configPath)
	if r.code != 0 || !strings.Contains(r.stdout, "granted role "+dbtest.RuntimeRole) || r.stderr != "" && strings.Contains(r.stderr, "warning") {
		t.Fatalf("migrate --grant-to: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	dbtest.Exec(t, owner, pulsesTable+"; GRANT SELECT, INSERT ON pulses TO "+dbtest.RuntimeRole+"; GRANT USAGE ON SEQUENCE pulses_id_seq TO "+dbtest.RuntimeRole)
	return runtime
}

// pulse is one row of the pulses table.
type pulse struct {
	id       int64
	instance string
	token    int64
}

func pulses(t *testing.T, url string) []pulse {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT id, instance, token FROM pulses ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var out []pulse
	var p pulse
	_, err = pgx.ForEachRow(rows, []any{&p.id, &p.instance, &p.token}, func() error {
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkPulses checks the fencing invariants over every row: tokens never go
// down in insert order, and each token (term) belongs to one instance.
func checkPulses(t *testing.T, ps []pulse) map[int64]string {
	t.Helper()
	owner := map[int64]string{}
	var last int64
	for _, p := range ps {
		if p.token <= 0 {
			t.Errorf("row %d: token %d: a singleton's write without a term", p.id, p.token)
		}
		if p.token < last {
			t.Errorf("row %d: token %d after token %d: a stale term wrote after a newer one", p.id, p.token, last)
		}
		last = p.token
		if o, seen := owner[p.token]; seen && o != p.instance {
			t.Errorf("token %d written by both %s and %s", p.token, o, p.instance)
		}
		owner[p.token] = p.instance
	}
	return owner
}

// leader returns the current leader of job, waiting until there is one whose
// token differs from not.
func leaderOf(t *testing.T, cli *clientv3.Client, job string, not int64) etcdlease.Leader {
	t.Helper()
	var l etcdlease.Leader
	etcdtest.WaitKeys(t, cli, testPrefix+"/", "a leader of "+job+" other than token "+strconv.FormatInt(not, 10), func() bool {
		got, ok, err := etcdlease.NewCluster(cli, testPrefix).LeaderKey(context.Background(), job)
		if err != nil {
			t.Fatal(err)
		}
		l = got
		return ok && got.Token != not
	})
	return l
}

// etcdClient is a plain client for the test's own reads.
func etcdClient(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// lines of s that contain every one of subs.
func linesWith(s string, subs ...string) []string { return clitest.LinesWith(s, subs...) }
