package main

import (
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// Under systemd socket activation (a .socket unit with FileDescriptorName=admin)
// run serves the admin endpoints on the socket it was passed, not on
// http.listen: here http.listen names a port the test itself holds, so
// listening there would fail, and the instance is ready all the same.
func TestRunServesTheAdminOnThePassedSocketInsteadOfHTTPListen(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	url := benchtest.PostgresDB(t)
	busy := benchtest.Listen(t) // http.listen: taken
	admin := benchtest.Listen(t)
	c := config{instance: "activated", endpoints: []string{etcd.Endpoint(0)}, jobs: pulseJob,
		adminPort: busy.Addr().(*net.TCPAddr).Port,
		passed:    []sockact.Socket{{Name: "admin", Listener: admin}}}
	env := dbEnv(migrate(t, writeConfig(t, c), url))
	in := start(t, c, env)
	if in.admin != "http://"+admin.Addr().String() {
		t.Fatalf("the test would ask %s, not the passed socket %s", in.admin, admin.Addr())
	}
	in.waitReady()
	if code, _ := in.get("/metrics"); code != http.StatusOK {
		t.Errorf("/metrics on the passed socket: %d", code)
	}
	if lines := linesWith(in.logs(), "admin HTTP listening", admin.Addr().String(), "passed socket"); len(lines) != 1 {
		t.Errorf("no log line saying the admin serves the passed socket %s:\n%s", admin.Addr(), in.logs())
	}
	in.signal(syscall.SIGTERM)
	if code := in.wait(); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}

// A socket under a name run does not know is most likely one of its own,
// misnamed; run refuses to start and says which names it takes.
func TestRunRefusesAPassedSocketItDoesNotKnow(t *testing.T) {
	t.Parallel()
	c := config{instance: "misnamed", endpoints: []string{"http://127.0.0.1:1"}, jobs: pulseJob,
		passed: []sockact.Socket{{Name: "snip-jobs-admin.socket", Listener: benchtest.Listen(t)}}}
	in := start(t, c, nil)
	if code := in.wait(); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	logs := in.logs()
	for _, want := range []string{`"snip-jobs-admin.socket"`, `"admin"`, `"challenge"`, "FileDescriptorName="} {
		if !strings.Contains(logs, want) {
			t.Errorf("the error does not say %s:\n%s", want, logs)
		}
	}
}
