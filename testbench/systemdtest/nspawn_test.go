package systemdtest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/systemdtest"
)

// A booted container runs systemd as its PID 1 in a PID namespace of its own;
// files written into it are there with their mode, its journal can be
// followed; and Close leaves nothing behind: no process of it, no mount on
// the host, and the cached tree as it was.
func TestBootRunsSystemdAndCloseLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	root, err := systemdtest.Rootfs(ctx, filepath.Join(base, "snip-jobs"))
	if err != nil {
		t.Fatal(err)
	}
	mountsBefore := hostMounts(t)
	ct, err := systemdtest.Boot(ctx, root, "nspawn-kit-test", filepath.Join(t.TempDir(), "console"))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = ct.Close()
		}
	})

	if comm, err := ct.Run(ctx, "cat", "/proc/1/comm"); err != nil || strings.TrimSpace(comm) != "systemd" {
		t.Fatalf("PID 1 in the container: %q, %v; want systemd", comm, err)
	}
	if pid, err := ct.HostPID(1); err != nil || pid != ct.Leader() {
		t.Fatalf("HostPID(1) = %d, %v; want the leader %d", pid, err, ct.Leader())
	}
	const file = "/etc/nspawn-kit-test/secret"
	if err := ct.WriteFile(ctx, file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := ct.Run(ctx, "stat", "--format=%a %U %n", filepath.Dir(file), file); err != nil ||
		st != "755 root "+filepath.Dir(file)+"\n600 root "+file+"\n" {
		t.Fatalf("stat in the container: %q, %v", st, err)
	}

	j, err := ct.Follow(ctx, "nspawn-kit-test-echo.service")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ct.Run(ctx, "systemd-run", "--wait", "--unit=nspawn-kit-test-echo", "echo", "hello from a unit"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if e, _, err := j.Wait(wctx, 0, func(e systemdtest.Entry) bool { return e.Message == "hello from a unit" }); err != nil || e.PID == 1 {
		t.Fatalf("the unit's line in the journal: %+v, %v\n%s", e, err, j.Dump())
	}
	j.Close()
	// What Close of a command ended inside was reaped there: an orphaned
	// zombie would hold the container's halt for 10 s.
	if ps, err := ct.Run(ctx, "ps", "-eo", "stat=,comm="); err != nil || strings.Contains(ps, "journalctl") {
		t.Errorf("after the journal was closed, the container's processes are:\n%s%v", ps, err)
	}

	leader := ct.Leader()
	closed = true
	if err := ct.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(leader, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the container's systemd (pid %d) after Close: %v; want it gone", leader, err)
	}
	if _, err := os.Stat(filepath.Join(root, file)); !os.IsNotExist(err) {
		t.Errorf("the file written in the container is in the cached tree: %v", err)
	}
	if after := hostMounts(t); after != mountsBefore {
		t.Errorf("the host's mounts changed:\nbefore:\n%s\nafter:\n%s", mountsBefore, after)
	}
}

// hostMounts lists the mount points of this process's mount namespace.
func hostMounts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 {
			points = append(points, f[4])
		}
	}
	return strconv.Itoa(len(points)) + "\n" + strings.Join(points, "\n")
}
