package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/snip/snip-jobs/testbench/childproc"
)

// run marks itself non-dumpable: a process of the service's own user — a
// reload command, an exec job's program, anything else that user runs —
// cannot read run's /proc/<pid>/environ, which holds the database URL with
// its password (the unit loads it with EnvironmentFile=), while it can read
// that of a dumpable process of the same user. As root, the test runs the
// service, the dumpable process and the readers as nobody (root may read
// any process's environment, and still may run's).
func TestAProcessOfTheServicesUserCannotReadItsEnvironment(t *testing.T) {
	t.Parallel()
	as := unprivileged(t)
	const password = "hunter2-in-the-environment"
	dir, err := os.MkdirTemp("", "snip-jobs-dumpable-") // readable by the user the processes run as
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	admin := freePort(t)
	config := filepath.Join(dir, "snip-jobs.yaml")
	text := fmt.Sprintf("instance: server-1\nhttp: {listen: 127.0.0.1:%d}\nlog: {format: json}\njobs: []\n", admin)
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	service := startAs(t, as, filepath.Join(dir, "service.log"), binary, []string{"run", "--config", config},
		"SNIP_JOBS_DATABASE_URL=postgres://snip:"+password+"@127.0.0.1:1/snip")
	eventually(t, "the service's /healthz", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", admin))
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	dumpable := startAs(t, as, filepath.Join(dir, "sleep.log"), "/bin/sleep", []string{"600"}, "SNIP_TEST_MARKER=dumpable")

	// Read once sleep has exec'd: between the fork and the exec the child
	// shows no environment of its own yet.
	eventually(t, "the same user reading a dumpable process's environment (else this test proves nothing)", func() bool {
		out, err := readEnviron(as, dumpable)
		return err == nil && strings.Contains(out, "SNIP_TEST_MARKER=dumpable")
	})
	if out, err := readEnviron(as, service); err == nil || strings.Contains(out, password) || !strings.Contains(out, "Permission denied") {
		t.Errorf("the same user reading run's environment: %v, %d bytes read (the password among them: %v); want it refused",
			err, len(out), strings.Contains(out, password))
	}
	if as != nil {
		if out, err := readEnviron(nil, service); err != nil || !strings.Contains(out, password) {
			t.Errorf("root reading run's environment: %v; want it read (what the test protects is there)", err)
		}
	}
}

// unprivileged is the user the test's processes run as: nobody when the
// test runs as root, else the test's own user (nil).
func unprivileged(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("the test runs as root and needs an unprivileged user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// startAs starts path with args as the user as, its output in log.
func startAs(t *testing.T, as *syscall.Credential, log, path string, args []string, env ...string) int {
	t.Helper()
	p, err := childproc.Start(childproc.Spec{Path: path, Args: args, Env: env, Log: log, Credential: as})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("--- %s ---\n%s", filepath.Base(log), b)
		}
	})
	return p.Pid()
}

// readEnviron reads /proc/<pid>/environ as the user as (cat, as a process
// of that user would).
func readEnviron(as *syscall.Credential, pid int) (string, error) {
	cmd := exec.Command("/bin/cat", "/proc/"+strconv.Itoa(pid)+"/environ")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: as}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
