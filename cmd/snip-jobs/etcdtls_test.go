package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
	"github.com/snip/snip-jobs/testbench/etcdtlstest"
)

// secure returns c set up for the cluster of etcdtest.StartSecure: its
// https endpoints, the CA, the test's client certificate, and snip-jobs' user
// (whose role may touch testPrefix's keys only) with its password in a file.
func secure(t *testing.T, etcd *etcdtest.Cluster, c config) config {
	t.Helper()
	sec := etcd.Security()
	c.endpoints = etcd.Endpoints()
	c.tlsCA, c.tlsCert, c.tlsKey = sec.PKI.CA, sec.PKI.ClientCert, sec.PKI.ClientKey
	c.user, c.passwordFile = sec.Auth.User, writeSecret(t, sec.Auth.Password)
	return c
}

func writeSecret(t *testing.T, s string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "etcd-password")
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Over TLS (a CA, a server certificate, client certificates) with etcd's
// authentication on, logged in as a user whose role may read and write only
// snip-jobs' key prefix (the grants of docs/operations.md): three instances
// elect a leader, status and resign work, a SIGKILLed leader is replaced once
// its lease expired, and a SIGTERMed one revokes its lease, which etcd allows
// only because every key on it is under the prefix.
func TestOverTLSWithAPrefixOnlyUserInstancesLeadFailOverAndResign(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.StartSecure(t, 3, testPrefix)
	observer := etcd.Client(t) // root
	url := benchtest.PostgresDB(t)
	env := dbEnv(url)
	// A 4 s lease: a keep-alive stream opened again (after a late answer)
	// logs in first, a bcrypt check and a raft round on a member sharing two
	// cores with the rest of the suite.
	mk := func(name string) config {
		return secure(t, etcd, config{instance: name, jobs: pulseJob, ttl: "ttl: 4s\n  margin: 1s\n  renew_interval: 800ms"})
	}
	migrate(t, writeConfig(t, mk("migrator")), url)
	procs := map[string]*instance{}
	for _, name := range []string{"server-a", "server-b", "server-c"} {
		procs[name] = start(t, mk(name), env)
	}
	for _, p := range procs {
		p.waitReady()
	}
	first := leaderOf(t, observer, "pulse", 0)
	waitPulses(t, url, "a pulse", func() bool { return checkPulses(t, pulses(t, url))[first.Token] != "" })
	checkLeaseKeysUnderThePrefix(t, observer)

	var cs status.Cluster
	r := snip(t, env, "status", "--json", "--config", procs[first.Instance].config)
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &cs) != nil || len(cs.Instances) != 3 || cs.Jobs[0].Leader == nil {
		t.Fatalf("status over TLS as the user: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := snip(t, env, "resign", "pulse", "--config", procs[first.Instance].config); r.code != 0 {
		t.Fatalf("resign over TLS as the user: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	second := leaderOf(t, observer, "pulse", first.Token)
	if second.Instance == first.Instance {
		t.Fatalf("after resign %s still leads", first.Instance)
	}

	killed := procs[second.Instance]
	killed.signal(syscall.SIGKILL)
	killed.wait()
	third := leaderOf(t, observer, "pulse", second.Token)
	if ttl, err := observer.TimeToLive(context.Background(), second.Lease); err != nil || ttl.TTL != -1 {
		t.Fatalf("%s won while the killed leader's lease was alive: %v, %v", third.Instance, ttl, err)
	}

	stopped := procs[third.Instance]
	stopped.signal(syscall.SIGTERM)
	fourth := leaderOf(t, observer, "pulse", third.Token)
	if code := stopped.wait(); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM\n%s", stopped.name, code, stopped.logs())
	}
	if ttl, err := observer.TimeToLive(context.Background(), third.Lease); err != nil || ttl.TTL != -1 {
		t.Errorf("%s's lease after SIGTERM: %v, %v; want it revoked", stopped.name, ttl, err)
	}
	if logs := stopped.logs(); strings.Contains(logs, "permission denied") {
		t.Errorf("%s could not revoke its lease as the prefix-only user:\n%s", stopped.name, logs)
	}
	waitPulses(t, url, "a pulse of the last term", func() bool { return checkPulses(t, pulses(t, url))[fourth.Token] != "" })
}

// checkLeaseKeysUnderThePrefix: every key on every instance's lease is under
// the prefix, which the user's role covers (a revoke deletes the lease's keys
// and needs write permission on each of them).
func checkLeaseKeysUnderThePrefix(t *testing.T, root *clientv3.Client) {
	t.Helper()
	ctx := context.Background()
	regs, err := etcdlease.NewCluster(root, testPrefix).Instances(ctx)
	if err != nil || len(regs) == 0 {
		t.Fatalf("instances: %v, %v", regs, err)
	}
	want := etcdtlstest.KeyRange(testPrefix)
	for _, r := range regs {
		id, err := strconv.ParseInt(r.Lease, 16, 64)
		if err != nil {
			t.Fatalf("%s's lease %q: %v", r.Instance, r.Lease, err)
		}
		ttl, err := root.TimeToLive(ctx, clientv3.LeaseID(id), clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ttl.Keys {
			if !strings.HasPrefix(string(k), want) {
				t.Errorf("%s's lease carries %q, outside %s: its user could not revoke it", r.Instance, k, want)
			}
		}
	}
}

// Each way etcd can refuse us — a wrong password, a server certificate from
// another CA, an expired client certificate — stops run at once with one
// error that names the endpoint and the cause, and no retries.
func TestEtcdRefusingUsGivesOneErrorNamingTheEndpointAndTheCause(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.StartSecure(t, 1, testPrefix)
	url := benchtest.PostgresDB(t)
	env := dbEnv(url)
	migrate(t, writeConfig(t, secure(t, etcd, config{instance: "migrator"})), url)
	pki := etcd.Security().PKI
	otherCA, err := etcdtlstest.OtherCA(t.TempDir(), "other-ca")
	if err != nil {
		t.Fatal(err)
	}
	expiredCert, expiredKey, err := pki.Client("expired", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	endpoint := etcd.Endpoint(0)
	for _, tc := range []struct {
		name   string
		break_ func(c *config)
		cause  string
	}{
		{"wrong password", func(c *config) { c.passwordFile = writeSecret(t, "not-the-password") },
			`login as user "snip-jobs" refused: wrong user name or password`},
		{"wrong CA", func(c *config) { c.tlsCA = otherCA },
			"its certificate is not signed by the CA in etcd.tls.ca " + otherCA},
		{"expired client certificate", func(c *config) { c.tlsCert, c.tlsKey = expiredCert, expiredKey },
			"it refused our client certificate " + expiredCert + ": it expired at "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := secure(t, etcd, config{instance: "server-a", jobs: pulseJob})
			tc.break_(&c)
			in := start(t, c, env)
			if code := in.wait(); code != 1 {
				t.Fatalf("exit %d, want 1\n%s", code, in.logs())
			}
			logs := in.logs()
			errs := linesWith(logs, `"level":"ERROR"`)
			var line struct{ Err string }
			if len(errs) != 1 || json.Unmarshal([]byte(errs[0]), &line) != nil || !strings.HasPrefix(line.Err, "etcd "+endpoint+": "+tc.cause) {
				t.Errorf("want one ERROR line naming %s and %q; the logs:\n%s", endpoint, tc.cause, logs)
			}
			if w := linesWith(logs, `"level":"WARN"`, "etcd"); len(w) > 0 {
				t.Errorf("warnings about etcd before the error (it should not wait or retry):\n%s", strings.Join(w, "\n"))
			}
		})
	}
}

// With etcd down at start, run waits for it the same way whether it has to
// log in or not: it outlives dial_timeout, says once that it is waiting,
// answers /healthz and says on /readyz that it holds no lease; it becomes
// ready when etcd is back.
func TestStartUpWaitsForAnUnreachableEtcdWithOrWithoutALogin(t *testing.T) {
	t.Parallel()
	for _, login := range []bool{false, true} {
		name := map[bool]string{false: "without login", true: "with login over TLS"}[login]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var etcd *etcdtest.Cluster
			c := config{instance: "server-a", jobs: pulseJob, dialTimeout: "1s"}
			if login {
				etcd = etcdtest.StartSecure(t, 1, testPrefix)
				c = secure(t, etcd, c)
			} else {
				etcd = etcdtest.Start(t, 1)
				c.endpoints = etcd.Endpoints()
			}
			url := benchtest.PostgresDB(t)
			env := dbEnv(url)
			migrate(t, writeConfig(t, c), url)
			etcd.Stop(t, 0)

			begin := time.Now()
			in := start(t, c, env)
			eventually(t, "the waiting line", func() bool {
				return len(linesWith(in.logs(), `"level":"WARN"`, "etcd does not answer yet; waiting", etcd.Endpoint(0))) == 1
			})
			time.Sleep(time.Until(begin.Add(3 * time.Second))) // three dial_timeouts
			if !in.running() {
				t.Fatalf("run exited while etcd was down, before its start timeout:\n%s", in.logs())
			}
			if code, _ := in.get("/healthz"); code != http.StatusOK {
				t.Errorf("/healthz while waiting for etcd: %d", code)
			}
			if code, body := in.get("/readyz"); code != http.StatusServiceUnavailable ||
				body != "not ready: etcd: the session holds no lease (etcd unreachable, or not yet granted)\n" {
				t.Errorf("/readyz while waiting for etcd: %d %q", code, body)
			}
			etcd.Restart(t, 0)
			in.waitReady()
			if n := len(linesWith(in.logs(), "etcd does not answer yet")); n != 1 {
				t.Errorf("%d waiting lines, want one:\n%s", n, in.logs())
			}
			in.signal(syscall.SIGTERM)
			if code := in.wait(); code != 0 {
				t.Fatalf("exit %d after SIGTERM\n%s", code, in.logs())
			}
		})
	}
}
