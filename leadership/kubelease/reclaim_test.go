package kubelease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// The test binary doubles as a child process that leads a job until killed,
// on Leases of a 30 s duration: a peer would wait that long to judge it gone.
const (
	childEnv = "KUBELEASE_TEST_CHILD" // "host token ca-file namespace instance job"
	childTTL = 30 * time.Second
)

func childMain() int {
	var host, token, ca, ns, instance, job string
	fmt.Sscan(os.Getenv(childEnv), &host, &token, &ca, &ns, &instance, &job)
	cs, err := kubetest.NewClientset(&rest.Config{Host: host, BearerToken: token, QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAFile: ca}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	s, err := kubelease.NewSession(kubelease.Config{Client: cs.CoordinationV1(), Namespace: ns, Config: leadership.Config{
		Instance: instance, TTL: childTTL, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	term, err := s.Campaign(context.Background(), job)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("leading", term.Token())
	select {} // until killed
}

// startChild starts a child process leading job as instance in ns, and
// waits until it leads; it returns the process and the term's token.
func startChild(t *testing.T, ns, instance, job string) (*exec.Cmd, int64) {
	t.Helper()
	rc := api.Config()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{rc.Host, rc.BearerToken, rc.CAFile, ns, instance, job}, " "))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	var token int64
	if _, serr := fmt.Sscanf(line, "leading %d", &token); err != nil || serr != nil {
		t.Fatalf("child: %q, %v", line, err)
	}
	return cmd, token
}

// kill kills a child like a crash and reaps it (a zombie still answers
// kill(pid, 0)); it returns when a peer that had just seen its instance Lease
// renewed would judge it gone, had nobody reclaimed it.
func kill(t *testing.T, child *exec.Cmd) (goneBy time.Time) {
	t.Helper()
	goneBy = time.Now().Add(childTTL)
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	return goneBy
}

// A restarted process of the same instance on the same host, whose
// predecessor is dead, takes over the predecessor's instance Lease at once
// (its annotations prove the process gone): the job Leases naming the dead
// incarnation are free then, and a waiting peer wins at once instead of
// after the predecessor's 30 s duration.
func TestARestartedProcessTakesOverItsDeadPredecessorAtOnce(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	child, oldToken := startChild(t, ns, "a", "sweep")
	goneBy := kill(t, child)

	other := start(t, api, ns, "b")
	next := campaign(other, "sweep")
	waitWaiting(t, other)
	restarted := start(t, api, ns, "a")
	if got := restarted.Stats().Reclaimed; got != 1 {
		t.Fatalf("took over %d predecessors' instance Leases, want 1", got)
	}
	term := won(t, next)
	if !term.Started().Before(goneBy) {
		t.Fatal("the job moved only when a peer would have judged the dead predecessor gone")
	}
	if term.Token() <= oldToken {
		t.Fatalf("token %d not above the predecessor's %d", term.Token(), oldToken)
	}
}

// Death reclaim without a restart: the supervisor that saw the process exit
// (systemd's ExecStopPost=) calls Reclaim; the dead process's instance Lease
// is deleted, and the instance waiting for its job wins at once instead of
// after the 30 s duration. A second Reclaim finds nothing.
func TestDeathReclaimMovesADeadProcesssJobsAtOnce(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	cluster := kubelease.NewCluster(clientset(t, api.Config()).CoordinationV1(), ns, "")
	child, oldToken := startChild(t, ns, "a", "aggregate")
	other := start(t, api, ns, "b")
	next := campaign(other, "aggregate")
	waitWaiting(t, other)
	goneBy := kill(t, child)

	got, err := leadership.Reclaim(context.Background(), cluster, "a", "")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Found || !got.Revoked || got.Registration.PID != child.Process.Pid {
		t.Fatalf("Reclaim = %+v; want the instance Lease of pid %d found and deleted", got, child.Process.Pid)
	}
	term := won(t, next)
	if !term.Started().Before(goneBy) {
		t.Fatal("the job moved only when a peer would have judged the dead process gone")
	}
	if term.Token() <= oldToken {
		t.Fatalf("token %d not above the dead leader's %d", term.Token(), oldToken)
	}
	again, err := leadership.Reclaim(context.Background(), cluster, "a", "")
	if err != nil || again.Found {
		t.Fatalf("a second Reclaim = %+v, %v; want nothing found", again, err)
	}
}

// Reclaim never ends the instance Lease of a process that runs, nor one
// another host wrote: a supervisor that calls it by mistake changes nothing.
func TestDeathReclaimLeavesARunningOrAnotherHostsProcessAlone(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	cluster := kubelease.NewCluster(clientset(t, api.Config()).CoordinationV1(), ns, "")
	child, token := startChild(t, ns, "a", "aggregate")
	got, err := leadership.Reclaim(context.Background(), cluster, "a", "")
	if !errors.Is(err, leadership.ErrStillRunning) || got.Revoked || !strings.Contains(err.Error(), fmt.Sprint(child.Process.Pid)) {
		t.Fatalf("Reclaim of a running process = %+v, %v; want ErrStillRunning naming pid %d", got, err, child.Process.Pid)
	}
	start(t, api, ns, "b", withHost("host-1"))
	got, err = leadership.Reclaim(context.Background(), cluster, "b", "host-2")
	if !errors.Is(err, leadership.ErrOtherHost) || got.Revoked || !strings.Contains(err.Error(), `"host-1"`) {
		t.Fatalf("Reclaim from host-2 = %+v, %v; want ErrOtherHost naming host-1", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	for _, inst := range []string{"a", "b"} {
		if reg, ok, err := cluster.Registration(ctx, inst); err != nil || !ok {
			t.Fatalf("after the refused reclaims, %s's instance Lease: %+v, %v, %v", inst, reg, ok, err)
		}
	}
	if l, ok, err := cluster.Leader(ctx, "aggregate"); err != nil || !ok || l.Token != token || l.PID != child.Process.Pid {
		t.Fatalf("leader after the refused reclaim = %+v, %v, %v; want the child's token %d", l, ok, err, token)
	}
}
