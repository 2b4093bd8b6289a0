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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

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
	cs            *kubernetes.Clientset
}

// startKube makes a namespace for the test on the test binary's shared
// kube-apiserver (kubetest.Shared).
func startKube(t *testing.T) kubeCluster {
	t.Helper()
	srv := kubetest.Shared(t)
	ns := srv.Namespace(t)
	rc := srv.Config()
	cs, err := kubernetes.NewForConfig(rc)
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
	mk := func(name string) config {
		if name == "server-b" {
			return config{instance: name, kube: kube.viaKubeconfig, jobs: pulseJob}
		}
		return config{instance: name, kube: kube.section, jobs: pulseJob}
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

	waitPulses(t, url, "a pulse", func() bool { return len(pulses(t, url)) > 0 })
	ps := pulses(t, url)
	first := ps[len(ps)-1]
	holder, ann, _ := kube.lease(t, kubePrefix+"-job-pulse")
	if !strings.HasPrefix(holder, first.instance+"/") || ann["jobs.snip.dev/token"] != strconv.FormatInt(first.token, 10) {
		t.Fatalf("job Lease held by %q with token %q; the newest row is %s's with token %d", holder, ann["jobs.snip.dev/token"], first.instance, first.token)
	}

	// status and the page show the leader and both instances from the
	// Leases; resign hands the job to the other instance with a higher token.
	checkKubeStatus(t, env, procs, first)
	first = resignOnKube(t, env, kube, url, procs[first.instance], first)

	killed := procs[first.instance]
	killed.signal(syscall.SIGKILL)
	if code := killed.wait(); code != -1 {
		t.Fatalf("%s exit status %d after SIGKILL", killed.name, code)
	}
	survivor := procs["server-a"]
	if killed == survivor {
		survivor = procs["server-b"]
	}
	second := takeover(t, url, survivor, first)
	checkPulses(t, pulses(t, url)) // the old term's rows all precede the new one's
	holder, ann, _ = kube.lease(t, kubePrefix+"-job-pulse")
	if !strings.HasPrefix(holder, survivor.name+"/") || ann["jobs.snip.dev/token"] != strconv.FormatInt(second.token, 10) {
		t.Errorf("job Lease held by %q with token %q; want %s with token %d", holder, ann["jobs.snip.dev/token"], survivor.name, second.token)
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
	if st := kubeStatus(t, env, survivor); st.Jobs[0].Leader == nil || st.Jobs[0].Leader.Instance != survivor.name ||
		st.Jobs[0].Leader.Token != second.token || len(st.Instances) != 1 || st.Instances[0].Name != survivor.name {
		t.Errorf("status --json after the kill: %+v (leader %+v)", st, st.Jobs[0].Leader)
	}

	survivor.signal(syscall.SIGTERM)
	if code := survivor.wait(); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM, want 0", survivor.name, code)
	}
	logs := survivor.logs()
	if len(linesWith(logs, `"msg":"term over"`, `"why":"shutdown"`, fmt.Sprintf(`"token":%d`, second.token))) != 1 || !strings.Contains(logs, "stopped cleanly") {
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

// checkKubeStatus checks that status (--json and the table) and the status
// page of each instance name the leader of pulse with its token, and both
// instances up on their instance Leases.
func checkKubeStatus(t *testing.T, env []string, procs map[string]*instance, lead pulse) {
	t.Helper()
	st := kubeStatus(t, env, procs[lead.instance])
	j := st.Jobs[0]
	if st.Backend != "kubernetes" || !st.LeadersKnown || j.Leader == nil || j.Leader.Instance != lead.instance || j.Leader.Token != lead.token ||
		j.Leader.Lease != kubePrefix+"-instance-"+lead.instance || !strings.HasPrefix(j.Leader.Holder, lead.instance+"/") || j.Leader.Renewed.IsZero() {
		t.Errorf("status --json: %+v, leader %+v; want %s with token %d", st, j.Leader, lead.instance, lead.token)
	}
	if len(st.Instances) != 2 {
		t.Fatalf("status --json: instances %+v, want server-a and server-b", st.Instances)
	}
	for _, in := range st.Instances {
		wantLeads := map[bool]int{true: 1, false: 0}[in.Name == lead.instance]
		if !in.Up || in.Leads != wantLeads || in.LeaseGrantedSeconds != 2 || in.Host == "" || in.PID != procs[in.Name].proc.Pid() {
			t.Errorf("status --json: instance %+v; want up, leading %d, a 2 s Lease (the tests' ttl), pid %d", in, wantLeads, procs[in.Name].proc.Pid())
		}
	}
	r := snip(t, env, "status", "--config", procs[lead.instance].config)
	if r.code != 0 || len(linesWith(r.stdout, "pulse", "leader", lead.instance, fmt.Sprint(lead.token), "renewed")) != 1 ||
		strings.Count(r.stdout, "ago, of 2s)") != 2 {
		t.Errorf("status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for name, p := range procs {
		var s statuspage.Snapshot
		code, body := p.get("/status/cluster.json")
		if err := json.Unmarshal([]byte(body), &s); code != http.StatusOK || err != nil || len(s.Errors) > 0 || s.Backend != "kubernetes" ||
			s.Jobs[0].Leader == nil || s.Jobs[0].Leader.Instance != lead.instance || s.Jobs[0].Leader.Token != lead.token || len(s.Instances) != 2 {
			t.Errorf("/status/cluster.json of %s: %d, %v\n%s", name, code, err, body)
		}
	}
}

// resignOnKube runs `resign pulse` and returns the first pulse of the term
// that follows: on the other instance, with a higher token, named by the
// job Lease.
func resignOnKube(t *testing.T, env []string, kube kubeCluster, url string, leader *instance, lead pulse) pulse {
	t.Helper()
	r := snip(t, env, "resign", "pulse", "--config", leader.config)
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("pulse: leader was %s (token %d)\n", lead.instance, lead.token)) {
		t.Fatalf("resign: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	holder, ann, _ := kube.lease(t, kubePrefix+"-job-pulse")
	next := strings.SplitN(holder, "/", 2)[0]
	token, _ := strconv.ParseInt(ann["jobs.snip.dev/token"], 10, 64)
	if next == lead.instance || token <= lead.token || !strings.Contains(r.stdout, fmt.Sprintf("pulse: now %s (token %d)\n", next, token)) {
		t.Fatalf("resign: the job Lease names %q with token %d after %s's token %d; output:\n%s", holder, token, lead.instance, lead.token, r.stdout)
	}
	var p pulse
	waitPulses(t, url, "a pulse of the term after resign", func() bool {
		for _, q := range pulses(t, url) {
			if q.token == token {
				p = q
				return true
			}
		}
		return false
	})
	if p.instance != next {
		t.Fatalf("token %d's rows are %s's; the job Lease names %s", token, p.instance, next)
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
	waitPulses(t, url, "a pulse", func() bool { return len(pulses(t, url)) > 0 })
	ps := pulses(t, url)
	first := ps[len(ps)-1]
	killed, survivor := procs[first.instance], procs["server-a"]
	if killed == survivor {
		survivor = procs["server-b"]
	}
	if r := snip(t, env, "reclaim", "--config", killed.config); r.code != 1 || !strings.Contains(r.stderr, "still running") {
		t.Fatalf("reclaim of a running instance: exit %d, want 1 and \"still running\":\n%s%s", r.code, r.stdout, r.stderr)
	}
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
	if strings.Contains(survivor.logs(), "marked a peer's instance Lease expired") {
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
