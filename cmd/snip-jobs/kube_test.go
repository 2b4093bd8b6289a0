package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/app/statuspage"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// kubePrefix starts the Leases' names in the kubernetes tests; the job
// Lease of pulse is <prefix>-job-pulse, an instance's <prefix>-instance-<name>
// (package kubelease's layout).
const kubePrefix = "snip-test"

// kubeCluster is a real kube-apiserver (testbench/kubetest) with a namespace
// for the test, the kubernetes section that reaches it as the config file
// spells it (server, a token file, the CA), and the admin's client for the
// test's own reads.
type kubeCluster struct {
	ns      string
	section string
	// viaKubeconfig reaches the same server through a kubeconfig file whose
	// current context is another namespace's: the section names the
	// context to use and takes the namespace from it.
	viaKubeconfig string
	cs            *kubetest.Clientset
}

// startKube makes a namespace for the test on the test binary's shared
// kube-apiserver (kubetest.Shared).
func startKube(t *testing.T) kubeCluster {
	t.Helper()
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	rc := srv.Config()
	cs, err := kubetest.NewClientset(rc)
	if err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(t.TempDir(), "kube-token")
	if err := os.WriteFile(token, []byte(srv.Token()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	section := fmt.Sprintf("  server: %s\n  token_file: %s\n  ca_file: %s\n  namespace: %s\n  prefix: %s\n",
		rc.Host, token, rc.TLSClientConfig.CAFile, ns, kubePrefix)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: admin, user: {tokenFile: %q}}]
contexts:
  - {name: elsewhere, context: {cluster: test, user: admin, namespace: default}}
  - {name: snip, context: {cluster: test, user: admin, namespace: %s}}
current-context: elsewhere
`, rc.Host, rc.TLSClientConfig.CAFile, token, ns)
	if err := os.WriteFile(kubeconfig, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	via := fmt.Sprintf("  kubeconfig: %s\n  context: snip\n  prefix: %s\n", kubeconfig, kubePrefix)
	return kubeCluster{ns: ns, section: section, viaKubeconfig: via, cs: cs}
}

// kubeTestTTL is the leadership block of the two-instance test.
const kubeTestTTL = "ttl: 4s\n  margin: 1s\n  renew_interval: 800ms"

// lease reads a Lease of the test's namespace (nil when there is none).
func (k kubeCluster) lease(t *testing.T, name string) (holder string, annotations map[string]string, found bool) {
	t.Helper()
	l, err := k.cs.CoordinationV1().Leases(k.ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	return holder, l.Annotations, true
}

// Two instances on Kubernetes Leases (leadership.backend: kubernetes, no
// etcd anywhere in their config), a real PostgreSQL and a singleton that
// records (instance, token) through the fence: one leads, named by the job
// Lease with the token its rows carry; SIGKILL it, and the other takes over
// (after marking the dead one's instance Lease expired: no supervisor ran
// reclaim) with a higher token, whose rows follow every row of the old one;
// SIGTERM then resigns and deletes its instance Lease, exit 0.
// server-b reaches the API server through a kubeconfig file (kubernetes.kubeconfig and context), server-a through server and token_file.
func TestTwoInstancesOnKubernetesLeasesHandASingletonOverWhenTheLeaderIsKilled(t *testing.T) {
	t.Parallel()
	kube := startKube(t)
	url := benchtest.PostgresDB(t)
	// server-b reaches the API server through a kubeconfig file's context.
	// A 4 s Lease: the checks between the kill and the SIGTERM take seconds
	// on a busy machine, and a lapse of the survivor's Lease then would end
	// its term before the SIGTERM this test is about.
	mk := func(name string) config {
		c := config{instance: name, kube: kube.section, jobs: pulseJob, ttl: kubeTestTTL}
		if name == "server-b" {
			c.kube = kube.viaKubeconfig
		}
		return c
	}
	env := dbEnv(migrate(t, writeConfig(t, mk("migrator")), url))
	procs, notes := map[string]*instance{}, map[string]notifications{}
	for _, name := range []string{"server-a", "server-b"} {
		notes[name] = notifySocket(t) // systemd's, one per unit
		procs[name] = start(t, mk(name), append(env, "NOTIFY_SOCKET="+notes[name].path, "WATCHDOG_USEC=1000000"))
	}
	for _, p := range procs {
		p.waitReady()
	}
	for _, p := range procs {
		if strings.Contains(p.logs(), "embedded single-member etcd") {
			t.Fatalf("%s started an etcd:\n%s", p.name, p.logs())
		}
	}

	leaseNamesRows(t, kube, url)

	// status and the page show the leader and both instances from the
	// Leases; resign hands the job to the other instance with a higher token.
	lead := checkKubeStatus(t, env, kube, procs)
	first := resignOnKube(t, env, url, procs[lead.instance], lead)

	killed := procs[first.instance]
	killed.signal(syscall.SIGKILL)
	if code := killed.wait(); code != -1 {
		t.Fatalf("%s exit status %d after SIGKILL", killed.name, code)
	}
	survivor := procs["server-a"]
	if killed == survivor {
		survivor = procs["server-b"]
	}
	takeover(t, url, survivor, first)
	checkPulses(t, pulses(t, url)) // the old term's rows all precede the new one's
	if l := leaseNamesRows(t, kube, url); l.instance != survivor.name {
		t.Errorf("after the kill the job Lease names %s (token %d); want %s", l.instance, l.token, survivor.name)
	}
	holder, ann, found := kube.lease(t, kubePrefix+"-instance-"+killed.name)
	if !found || holder != "" || ann["jobs.snip.dev/expired-by"] != survivor.name {
		t.Errorf("the killed instance's Lease: found %v, holder %q, expired by %q; want it released and marked expired by %s",
			found, holder, ann["jobs.snip.dev/expired-by"], survivor.name)
	}

	// The survivor pings the watchdog, healthy on its instance Lease, as
	// the leader of the job (the test fails waiting otherwise).
	notes[survivor.name].next(t, "WATCHDOG=1\nSTATUS=1 job(s), leading 1")
	// status names the survivor; the killed instance's Lease, released by
	// the survivor, is not listed.
	agreeWithLease(t, kube, func(lead pulse) []string {
		if st := kubeStatus(t, env, survivor); lead.instance != survivor.name || st.Jobs[0].Leader == nil || st.Jobs[0].Leader.Instance != survivor.name ||
			st.Jobs[0].Leader.Token != lead.token || len(st.Instances) != 1 || st.Instances[0].Name != survivor.name {
			return []string{fmt.Sprintf("status --json after the kill: %+v (leader %+v); the job Lease names %s (token %d)", st, st.Jobs[0].Leader, lead.instance, lead.token)}
		}
		return nil
	})

	survivor.signal(syscall.SIGTERM)
	if code := survivor.wait(); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM, want 0", survivor.name, code)
	}
	logs := survivor.logs()
	if len(linesWith(logs, `"msg":"term over"`, `"why":"shutdown"`)) != 1 || !strings.Contains(logs, "stopped cleanly") {
		t.Errorf("%s did not resign its term at shutdown:\n%s", survivor.name, logs)
	}
	if holder, _, _ := kube.lease(t, kubePrefix+"-job-pulse"); holder != "" {
		t.Errorf("job Lease still held by %q after its leader's SIGTERM", holder)
	}
	if _, _, found := kube.lease(t, kubePrefix+"-instance-"+survivor.name); found {
		t.Errorf("%s's instance Lease is still there after SIGTERM", survivor.name)
	}
	// Nobody leads pulse now: resign says so.
	want := "pulse has no leader now: nothing to resign"
	if r := snip(t, env, "resign", "pulse", "--config", survivor.config); r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("resign with no leader: exit %d, want 1 and %q in:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
}

// kubeStatus runs `status --json` with in's config.
func kubeStatus(t *testing.T, env []string, in *instance) status.Cluster {
	t.Helper()
	r := snip(t, env, "status", "--json", "--config", in.config)
	var st status.Cluster
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	return st
}

// jobLease is the holder of pulse's job Lease, once one holds it, with the
// token written with it.
func jobLease(t *testing.T, kube kubeCluster) pulse {
	t.Helper()
	var l pulse
	kubetest.WaitLeases(t, kube.cs.CoordinationV1(), kube.ns, "a holder of the job Lease", func() bool {
		holder, ann, _ := kube.lease(t, kubePrefix+"-job-pulse")
		l.instance, _, _ = strings.Cut(holder, "/")
		l.token, _ = strconv.ParseInt(ann["jobs.snip.dev/token"], 10, 64)
		return l.instance != ""
	})
	return l
}

// leaseNamesRows checks that the job Lease names the leader with the token
// its rows carry, and returns the first row of that term: it waits for a
// row of the token the Lease names at the time (under load a 2 s Lease may
// lapse, and the job be won again with a new token, between a row and the
// read of the Lease).
func leaseNamesRows(t *testing.T, kube kubeCluster, url string) pulse {
	t.Helper()
	var row pulse
	waitPulses(t, url, "a pulse of the term the job Lease names", func() bool {
		l := jobLease(t, kube)
		for _, p := range pulses(t, url) {
			if p.token == l.token {
				if p.instance != l.instance {
					t.Fatalf("the job Lease names %s with token %d; that token's rows are %s's", l.instance, l.token, p.instance)
				}
				row = p
				return true
			}
		}
		return false
	})
	return row
}

// agreeWithLease runs check with the job Lease's holder and token, read just
// before it, and reports what check found disagreeing. When the Lease names
// another term once check is done (a 2 s Lease lapsed under load and the job
// was won again), what check read may be of either term: it runs again, up
// to three times. It returns the Lease's holder check agreed with.
func agreeWithLease(t *testing.T, kube kubeCluster, check func(lead pulse) []string) pulse {
	t.Helper()
	for attempt := 1; ; attempt++ {
		lead := jobLease(t, kube)
		errs := check(lead)
		if now := jobLease(t, kube); now != lead && attempt < 3 {
			t.Logf("the job Lease went from %s (token %d) to %s (token %d) while status was read: reading again", lead.instance, lead.token, now.instance, now.token)
			continue
		}
		for _, e := range errs {
			t.Error(e)
		}
		return lead
	}
}

// checkKubeStatus checks that status (--json and the table) and the status
// page of each instance name the leader of pulse with its token, as the job
// Lease does, and both instances up on their instance Leases. It returns
// that leader.
func checkKubeStatus(t *testing.T, env []string, kube kubeCluster, procs map[string]*instance) pulse {
	t.Helper()
	return agreeWithLease(t, kube, func(lead pulse) (errs []string) {
		since := time.Now()
		st := kubeStatus(t, env, procs[lead.instance])
		j := st.Jobs[0]
		if st.Backend != "kubernetes" || !st.LeadersKnown || j.Leader == nil || j.Leader.Instance != lead.instance || j.Leader.Token != lead.token ||
			j.Leader.Lease != kubePrefix+"-instance-"+lead.instance || !strings.HasPrefix(j.Leader.Holder, lead.instance+"/") || j.Leader.Renewed.IsZero() {
			errs = append(errs, fmt.Sprintf("status --json: %+v, leader %+v; want %s with token %d", st, j.Leader, lead.instance, lead.token))
		}
		if len(st.Instances) != 2 {
			errs = append(errs, fmt.Sprintf("status --json: instances %+v, want server-a and server-b", st.Instances))
		}
		for _, in := range st.Instances {
			wantLeads := map[bool]int{true: 1, false: 0}[in.Name == lead.instance]
			if !in.Up || in.Leads != wantLeads || in.LeaseGrantedSeconds != 4 || in.Host == "" || in.PID != procs[in.Name].proc.Pid() {
				errs = append(errs, fmt.Sprintf("status --json: instance %+v; want up, leading %d, a 4 s Lease (the test's ttl), pid %d", in, wantLeads, procs[in.Name].proc.Pid()))
			}
		}
		r := snip(t, env, "status", "--config", procs[lead.instance].config)
		if r.code != 0 || len(linesWith(r.stdout, "pulse", "leader", lead.instance, fmt.Sprint(lead.token), "renewed")) != 1 ||
			strings.Count(r.stdout, "ago, of 4s)") != 2 {
			errs = append(errs, fmt.Sprintf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr))
		}
		for name, p := range procs {
			// The page shares a read for half a second: wait for one made
			// after the Lease was.
			var s statuspage.Snapshot
			var code int
			var body string
			var err error
			eventually(t, "a read of "+name+"'s page after the Lease's", func() bool {
				code, body = p.get("/status/cluster.json")
				err = json.Unmarshal([]byte(body), &s)
				return code != http.StatusOK || err != nil || s.LocalNow.After(since)
			})
			if code != http.StatusOK || err != nil || len(s.Errors) > 0 || s.Backend != "kubernetes" ||
				s.Jobs[0].Leader == nil || s.Jobs[0].Leader.Instance != lead.instance || s.Jobs[0].Leader.Token != lead.token || len(s.Instances) != 2 {
				errs = append(errs, fmt.Sprintf("/status/cluster.json of %s: %d, %v; want %s with token %d\n%s", name, code, err, lead.instance, lead.token, body))
			}
		}
		return errs
	})
}

// resignOnKube runs `resign pulse` and returns the first pulse of the term
// that follows: on the other instance, with a higher token than the term
// resigned. That is lead's, or, when lead's lapsed under load since it was
// read, a later one.
func resignOnKube(t *testing.T, env []string, url string, leader *instance, lead pulse) pulse {
	t.Helper()
	r := snip(t, env, "resign", "pulse", "--config", leader.config)
	m := regexp.MustCompile(`(?m)^pulse: leader was (server-[ab]) \(token (\d+)\)\n(?:.*\n)*pulse: now (server-[ab]) \(token (\d+)\)$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("resign: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	was, next := pulse{instance: m[1]}, pulse{instance: m[3]}
	was.token, _ = strconv.ParseInt(m[2], 10, 64)
	next.token, _ = strconv.ParseInt(m[4], 10, 64)
	if was.token < lead.token || was.token == lead.token && was.instance != lead.instance || next.instance == was.instance || next.token <= was.token {
		t.Fatalf("resign of %s's term %d:\n%s", lead.instance, lead.token, r.stdout)
	}
	var p pulse
	waitPulses(t, url, "a pulse of the term after resign", func() bool {
		for _, q := range pulses(t, url) {
			if q.token == next.token {
				p = q
				return true
			}
		}
		return false
	})
	if p.instance != next.instance {
		t.Fatalf("token %d's rows are %s's; resign said %s took over", next.token, p.instance, next.instance)
	}
	checkPulses(t, pulses(t, url))
	return p
}

// status, resign and reclaim go to the API server with the kubernetes
// backend (never to an etcd that is not there), and say which setting keeps
// them from it (exit 1).
func TestStatusResignAndReclaimOnKubernetesNameTheSettingThatKeepsThemFromIt(t *testing.T) {
	t.Parallel()
	section := "  server: https://127.0.0.1:1\n  token_file: /nonexistent/token\n  namespace: snip\n"
	path := writeConfig(t, config{instance: "server-a", kube: section, jobs: pulseJob, adminPort: 1})
	for _, args := range [][]string{{"status"}, {"resign", "pulse"}, {"reclaim"}} {
		r := snip(t, nil, append(args, "--config", path)...)
		if want := "kubernetes.token_file /nonexistent/token"; r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: exit %d, want 1 and %q in:\n%s%s", args[0], r.code, want, r.stdout, r.stderr)
		}
	}
	if r := snip(t, nil, "validate", "--config", path); r.code != 0 {
		t.Errorf("validate: exit %d\n%s", r.code, r.stderr)
	}

	// validate reports a bad kubernetes setting at its line (the section's
	// second: after instance and kubernetes:).
	bad := writeConfig(t, config{instance: "server-a", kube: "  server: http://127.0.0.1:6443\n  token_file: /t\n  namespace: snip\n", adminPort: 1})
	want := bad + ":3:11: kubernetes.server \"http://127.0.0.1:6443\" is plain HTTP"
	if r := snip(t, nil, "validate", "--config", bad); r.code != 2 || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("validate of a plain-HTTP server: exit %d, want 2 and a line starting %q:\n%s", r.code, want, r.stderr)
	}
}

// notifications is a socket standing in for systemd's NOTIFY_SOCKET: every
// datagram the instances send, in order.
type notifications struct {
	path string
	ch   chan string
}

func notifySocket(t *testing.T) notifications {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd") // a socket path must be short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n := notifications{path: filepath.Join(dir, "notify"), ch: make(chan string, 1024)}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			select {
			case n.ch <- string(buf[:k]):
			default: // nobody reads: drop
			}
		}
	}()
	return n
}

// next waits for the next datagram that is want.
func (n notifications) next(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(waitLong)
	for {
		select {
		case m := <-n.ch:
			if m == want {
				return
			}
		case <-timeout:
			t.Fatalf("no notification %q", want)
		}
	}
}

// systemd's ExecStopPost=snip-jobs reclaim on the kubernetes backend: once
// the leader's process is dead, reclaim deletes its instance Lease (its
// annotations name this host, its PID and start time), and the other
// instance takes the job without waiting to see the Lease unchanged for its
// duration: nobody marks it expired. A second reclaim finds nothing to do;
// reclaim of a running instance leaves it alone (exit 1).
func TestReclaimOnKubernetesEndsADeadInstancesLease(t *testing.T) {
	t.Parallel()
	kube := startKube(t)
	url := benchtest.PostgresDB(t)
	mk := func(name string) config { return config{instance: name, kube: kube.section, jobs: pulseJob} }
	env := dbEnv(migrate(t, writeConfig(t, mk("migrator")), url))
	procs := map[string]*instance{}
	for _, name := range []string{"server-a", "server-b"} {
		procs[name] = start(t, mk(name), env)
	}
	for _, p := range procs {
		p.waitReady()
	}
	first := leaseNamesRows(t, kube, url)
	killed, survivor := procs[first.instance], procs["server-a"]
	if killed == survivor {
		survivor = procs["server-b"]
	}
	if r := snip(t, env, "reclaim", "--config", killed.config); r.code != 1 || !strings.Contains(r.stderr, "still running") {
		t.Fatalf("reclaim of a running instance: exit %d, want 1 and \"still running\":\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Under load the survivor may have marked a lapsed Lease of the killed
	// instance expired before the kill: only what it did after counts.
	marked := strings.Count(survivor.logs(), "marked a peer's instance Lease expired")
	killed.signal(syscall.SIGKILL)
	killed.wait()
	r := snip(t, env, "reclaim", "--config", killed.config)
	if r.code != 0 || !strings.Contains(r.stderr, "revoked its lease, its jobs move now") {
		t.Fatalf("reclaim after the kill: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	takeover(t, url, survivor, first)
	if _, _, found := kube.lease(t, kubePrefix+"-instance-"+killed.name); found {
		t.Errorf("the killed instance's Lease is still there after reclaim")
	}
	if strings.Count(survivor.logs(), "marked a peer's instance Lease expired") > marked {
		t.Errorf("%s waited out the dead instance's Lease although reclaim had ended it:\n%s", survivor.name, survivor.logs())
	}
	if r := snip(t, env, "reclaim", "--config", killed.config); r.code != 0 || !strings.Contains(r.stderr, "nothing to do") {
		t.Errorf("a second reclaim: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	checkPulses(t, pulses(t, url))
}

// A kubeconfig whose chosen context's cluster would take the credentials
// without TLS (an http:// server) or to a server whose certificate is not
// checked (insecure-skip-tls-verify: true) is refused as kubernetes.server:
// http:// is: by validate (exit 2, at kubernetes.kubeconfig's line), by run
// (exit 1) and status, each naming the file, the context and the setting;
// and the bearer token never reaches the server, one with a certificate no
// one signed for it (or plain HTTP) that records what it is sent. The
// context is the one the config chooses: kubernetes.context, else the
// kubeconfig's current one; another context of the file may be bad.
func TestAKubeconfigThatTurnsTLSOffIsRefusedByValidateAndRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const secret = "token-that-must-not-travel"
	token := filepath.Join(dir, "kube-token")
	if err := os.WriteFile(token, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// trap records the Authorization headers it is sent.
	var mu sync.Mutex
	var sent []string
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "trap", http.StatusForbidden)
	})
	tlsTrap, plainTrap := httptest.NewTLSServer(record), httptest.NewServer(record)
	t.Cleanup(tlsTrap.Close)
	t.Cleanup(plainTrap.Close)

	kubeconfig := func(name, current, bad string) string {
		path := filepath.Join(dir, name)
		doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
  - {name: bad, cluster: %s}
  - {name: good, cluster: {server: "https://127.0.0.1:1"}}
users: [{name: snip, user: {tokenFile: %q}}]
contexts:
  - {name: snip, context: {cluster: bad, user: snip, namespace: snip}}
  - {name: safe, context: {cluster: good, user: snip, namespace: snip}}
current-context: %s
`, bad, token, current)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct {
		name, current, context, bad, want string
	}{
		{"insecure, by kubernetes.context", "safe", "snip", fmt.Sprintf(`{server: %q, insecure-skip-tls-verify: true}`, tlsTrap.URL),
			`context "snip" (cluster "bad"): insecure-skip-tls-verify: true turns off the check of the API server's certificate, so the credentials would go to whoever answers at ` + tlsTrap.URL},
		{"plain HTTP, the current context", "snip", "", fmt.Sprintf(`{server: %q}`, plainTrap.URL),
			fmt.Sprintf(`context "snip" (cluster "bad"): server %q is plain HTTP, so the credentials would travel in clear text: write https://`, plainTrap.URL)},
	} {
		kc := kubeconfig(strings.ReplaceAll(c.name, " ", "-"), c.current, c.bad)
		section := "  kubeconfig: " + kc + "\n"
		if c.context != "" {
			section += "  context: " + c.context + "\n"
		}
		cfg := config{instance: "server-a", kube: section, jobs: pulseJob}
		path := writeConfig(t, cfg)
		want := path + ":3:15: kubernetes.kubeconfig " + kc + ": " + c.want
		if r := snip(t, nil, "validate", "--config", path); r.code != 2 || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("%s: validate: exit %d, want 2 and a line starting %q:\n%s%s", c.name, r.code, want, r.stdout, r.stderr)
		}
		refusal := "kubernetes.kubeconfig " + kc + " (in " + path + "): " + c.want
		if r := snip(t, nil, "status", "--config", path); r.code != 1 || !strings.Contains(r.stderr, refusal) {
			t.Errorf("%s: status: exit %d, want 1 and %q in:\n%s%s", c.name, r.code, refusal, r.stdout, r.stderr)
		}
		in := start(t, cfg, dbEnv("postgres://snip@127.0.0.1:1/snip?sslmode=disable"))
		refusal = "snip-jobs run: kubernetes.kubeconfig " + kc + " (in " + in.config + "): " + c.want
		if code := in.wait(); code != 1 || !strings.Contains(in.logs(), refusal) {
			t.Errorf("%s: run: exit %d, want 1 and %q:\n%s", c.name, code, refusal, in.logs())
		}
	}
	// The same files, with the config choosing the good context: nothing to refuse.
	kc := kubeconfig("choose-the-good-one", "snip", `{server: "http://127.0.0.1:1", insecure-skip-tls-verify: true}`)
	good := writeConfig(t, config{instance: "server-a", kube: "  kubeconfig: " + kc + "\n  context: safe\n", jobs: pulseJob})
	if r := snip(t, nil, "validate", "--config", good); r.code != 0 {
		t.Errorf("validate of a config choosing the kubeconfig's good context: exit %d\n%s", r.code, r.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) > 0 {
		t.Errorf("%d request(s) reached a refused server, the first with Authorization %q (the token is %q)", len(sent), sent[0], secret)
	}
}

// takeover waits for survivor's first pulse after the killed leader's last
// one, first, and checks that its token is newer.
func takeover(t *testing.T, url string, survivor *instance, first pulse) pulse {
	t.Helper()
	var second pulse
	waitPulses(t, url, "a pulse of "+survivor.name, func() bool {
		for _, p := range pulses(t, url) {
			if p.instance == survivor.name && p.id > first.id {
				second = p
				return true
			}
		}
		return false
	})
	if second.token <= first.token {
		t.Fatalf("%s took over with token %d, not above the killed leader's %d", survivor.name, second.token, first.token)
	}
	return second
}
