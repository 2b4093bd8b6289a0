package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/snip/snip-jobs/internal/kubeapi"
	"github.com/snip/snip-jobs/internal/testenv"
)

// kubePrefix starts the Leases' names in the kubernetes tests; the job
// Lease of pulse is <prefix>-job-pulse, an instance's <prefix>-instance-<name>
// (package kubelease's layout).
const kubePrefix = "snip-test"

// kubeCluster is a real kube-apiserver (internal/kubeapi) with a namespace
// for the test, the kubernetes section that reaches it as the config file
// spells it (server, a token file, the CA), and the admin's client for the
// test's own reads.
type kubeCluster struct {
	ns      string
	section string
	cs      *kubernetes.Clientset
}

func startKube(t *testing.T) kubeCluster {
	t.Helper()
	srv, err := kubeapi.Start(context.Background(), kubeapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rc := srv.Config()
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "snip-jobs"
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(t.TempDir(), "kube-token")
	if err := os.WriteFile(token, []byte(srv.Token()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	section := fmt.Sprintf("  server: %s\n  token_file: %s\n  ca_file: %s\n  namespace: %s\n  prefix: %s\n",
		rc.Host, token, rc.TLSClientConfig.CAFile, ns, kubePrefix)
	return kubeCluster{ns: ns, section: section, cs: cs}
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
// (after marking the dead one's instance Lease expired: there is no death
// reclaim) with a higher token, whose rows follow every row of the old one;
// SIGTERM then resigns and deletes its instance Lease, exit 0.
func TestTwoInstancesOnKubernetesLeasesHandASingletonOverWhenTheLeaderIsKilled(t *testing.T) {
	t.Parallel()
	kube := startKube(t)
	url := testenv.PostgresDB(t)
	mk := func(name string) config { return config{instance: name, kube: kube.section, jobs: pulseJob} }
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

	killed := procs[first.instance]
	killed.signal(syscall.SIGKILL)
	if code := killed.wait(); code != -1 {
		t.Fatalf("%s exit status %d after SIGKILL", killed.name, code)
	}
	survivor := procs["server-a"]
	if killed == survivor {
		survivor = procs["server-b"]
	}
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
	// The status page says what it cannot show with this backend, naming
	// the file, rather than showing no leader.
	want := "showing the leaders and the instances works with etcd only for now, and " + survivor.config + " has leadership.backend: kubernetes"
	if code, body := survivor.get("/status/cluster.json"); code != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("/status/cluster.json: %d, want %q in:\n%s", code, want, body)
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
}

// The commands that read etcd say, with the kubernetes backend, that they
// are not available, naming the file and its backend (exit 1), instead of
// dialling an etcd that is not there.
func TestEtcdOnlyCommandsRefuseTheKubernetesBackendNamingTheFile(t *testing.T) {
	t.Parallel()
	section := "  server: https://127.0.0.1:1\n  token_file: /nonexistent/token\n  namespace: snip\n"
	path := writeConfig(t, config{instance: "server-a", kube: section, jobs: pulseJob, adminPort: 1})
	for _, args := range [][]string{{"status"}, {"resign", "pulse"}, {"reclaim"}} {
		r := snip(t, nil, append(args, "--config", path)...)
		want := args[0] + " works with etcd only for now, and " + path + " has leadership.backend: kubernetes"
		if r.code != 1 || !strings.Contains(r.stderr, want) {
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
