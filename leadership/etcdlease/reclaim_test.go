package etcdlease_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// The test binary doubles as a child process that leads a job until killed:
// with a snip-jobs session (TTL 30 s unless the child's TTL says otherwise),
// or, for the benchmarks, with etcd's concurrency.Election.
const (
	childEnv     = "LEADERSHIP_TEST_CHILD"
	childTTLEnv  = "LEADERSHIP_TEST_CHILD_TTL"
	childImplEnv = "LEADERSHIP_TEST_CHILD_IMPL" // "election": concurrency.Election
)

func childMain() int {
	var endpoints, prefix, instance, job string
	fmt.Sscan(os.Getenv(childEnv), &endpoints, &prefix, &instance, &job)
	ttl := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv(childTTLEnv)); err == nil {
		ttl = d
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoints, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if os.Getenv(childImplEnv) == "election" {
		es, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		e := concurrency.NewElection(es, prefix+"/"+job)
		if err := e.Campaign(context.Background(), instance); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("leading", e.Rev(), int64(es.Lease()))
		select {} // until killed
	}
	s, err := etcdlease.NewSession(etcdlease.Config{Client: cli, Prefix: prefix, Config: leadership.Config{
		Instance: instance, TTL: ttl, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
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
	lease, _ := strconv.ParseInt(term.Lease(), 16, 64)
	fmt.Println("leading", term.Token(), lease)
	select {} // until killed
}

// startChild starts a child process leading job as instance, and waits until it leads.
func startChild(t testing.TB, endpoints []string, instance, job string, env ...string) (*exec.Cmd, int64, clientv3.LeaseID) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{strings.Join(endpoints, ","), prefix(t), instance, job}, " "))
	cmd.Env = append(cmd.Env, env...)
	if _, bench := t.(*testing.B); !bench {
		cmd.Stderr = os.Stderr
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	var token, lease int64
	if _, serr := fmt.Sscanf(line, "leading %d %d", &token, &lease); err != nil || serr != nil {
		t.Fatalf("child: %q, %v", line, err)
	}
	return cmd, token, clientv3.LeaseID(lease)
}

// 9. A restarted process of the same instance on the same host, whose
// predecessor is dead, revokes the predecessor's lease: its singletons move at
// once instead of after the predecessor's 30 s lease expires.
func TestRestartedInstanceReclaimsItsDeadPredecessorsLease(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcd.Client(t)
	child, oldToken, oldLease := startChild(t, etcd.Endpoints(), "server-a", "cert-renewer")

	// Kill it like a crash, and reap it (a zombie still answers kill(pid, 0)).
	ttl, err := observer.TimeToLive(context.Background(), oldLease)
	if err != nil {
		t.Fatal(err)
	}
	expiresBy := time.Now().Add(time.Duration(ttl.TTL) * time.Second) // had nobody revoked it
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	// Another instance was already waiting; the restarted one also campaigns.
	other := startSession(t, etcd.Client(t), "server-b", withTTL(30*time.Second, 9*time.Second))
	next := campaign(context.Background(), other, "cert-renewer")
	restarted := startSession(t, etcd.Client(t), "server-a", withTTL(30*time.Second, 9*time.Second))
	if got := restarted.Stats().Reclaimed; got != 1 {
		t.Fatalf("reclaimed %d predecessor leases, want 1", got)
	}
	term := await(t, next, "server-b")
	if !term.Started().Before(expiresBy) {
		t.Fatal("the job moved only when the dead predecessor's lease would have expired")
	}
	if leaseAlive(t, observer, oldLease) {
		t.Fatal("the predecessor's lease is still alive")
	}
	if term.Token() <= oldToken {
		t.Fatalf("token %d not above the predecessor's %d", term.Token(), oldToken)
	}
}

func TestSecondLiveProcessWithTheSameInstanceNameIsRefused(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	child, _, lease := startChild(t, etcd.Endpoints(), "server-a", "aggregator")
	_ = child

	s, err := etcdlease.NewSession(config(t, etcd.Client(t), "server-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	err = s.WaitReady(ctx)
	var dup *etcdlease.DuplicateInstanceError
	if !errors.As(err, &dup) || !dup.SameHost || dup.Existing.PID != child.Process.Pid {
		t.Fatalf("WaitReady = %v; want a DuplicateInstanceError naming pid %d on this host", err, child.Process.Pid)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(child.Process.Pid)) {
		t.Fatalf("error does not name the running pid: %v", err)
	}
	if !leaseAlive(t, etcd.Client(t), lease) {
		t.Fatal("the refused process revoked the live process's lease")
	}
	if _, err := s.Campaign(ctx, "aggregator"); !errors.As(err, &dup) {
		t.Fatalf("Campaign on a refused session: %v", err)
	}
}

func TestSameInstanceNameFromAnotherHostIsRefused(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	startSession(t, etcd.Client(t), "server-a", withHost("host-1"))

	s, err := etcdlease.NewSession(config(t, etcd.Client(t), "server-a", withHost("host-2")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	err = s.WaitReady(ctx)
	var dup *etcdlease.DuplicateInstanceError
	if !errors.As(err, &dup) || dup.SameHost || dup.Existing.Host != "host-1" {
		t.Fatalf("WaitReady = %v; want a DuplicateInstanceError naming host-1", err)
	}
	if !strings.Contains(err.Error(), `"host-1"`) {
		t.Fatalf("error does not name the other host: %v", err)
	}
}

func TestDeregisterKeepsTheTermsButLeavesTheInstanceList(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	a := startSession(t, etcd.Client(t), "server-a")
	startSession(t, etcd.Client(t), "server-b")
	term := mustWin(t, a, "aggregator")
	if err := a.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	regs, err := etcdlease.NewCluster(cli, prefix(t)).Instances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != 1 || regs[0].Instance != "server-b" {
		t.Fatalf("instances after server-a deregistered: %+v", regs)
	}
	if !term.Valid() {
		t.Fatal("deregistering ended the term")
	}
}

// Death reclaim without a restart: the supervisor that saw the process exit
// (systemd's ExecStopPost=, snip-dev, the chaos harness) calls Reclaim;
// the dead process's lease is revoked, its leader keys go with it, and the
// instance waiting for its job wins at once instead of after the 30 s lease.
func TestDeathReclaimMovesADeadProcesssJobsAtOnce(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcd.Client(t)
	child, oldToken, oldLease := startChild(t, etcd.Endpoints(), "server-a", "aggregator")
	other := startSession(t, etcd.Client(t), "server-b", withTTL(30*time.Second, 9*time.Second))
	next := campaign(context.Background(), other, "aggregator")
	ttl, err := observer.TimeToLive(context.Background(), oldLease)
	if err != nil {
		t.Fatal(err)
	}
	expiresBy := time.Now().Add(time.Duration(ttl.TTL) * time.Second) // had nobody revoked it

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait() // the supervisor reaps it, then reclaims
	got, err := leadership.Reclaim(context.Background(), etcdlease.NewCluster(observer, prefix(t)), "server-a", "")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Found || !got.Revoked || got.Registration.PID != child.Process.Pid {
		t.Fatalf("Reclaim = %+v; want the registration of pid %d found and its lease revoked", got, child.Process.Pid)
	}
	term := await(t, next, "server-b")
	if !term.Started().Before(expiresBy) {
		t.Fatal("the job moved only when the dead process's lease would have expired")
	}
	if leaseAlive(t, observer, oldLease) {
		t.Fatal("the dead process's lease is still alive")
	}
	if term.Token() <= oldToken {
		t.Fatalf("token %d not above the dead leader's %d", term.Token(), oldToken)
	}
	again, err := leadership.Reclaim(context.Background(), etcdlease.NewCluster(observer, prefix(t)), "server-a", "")
	if err != nil || again.Found {
		t.Fatalf("a second Reclaim = %+v, %v; want nothing found", again, err)
	}
}

// Reclaim never revokes the lease of a process that runs: a supervisor that
// calls it by mistake (or for a process it did not start) changes nothing.
func TestDeathReclaimLeavesARunningProcessAlone(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcd.Client(t)
	child, token, lease := startChild(t, etcd.Endpoints(), "server-a", "aggregator")
	got, err := leadership.Reclaim(context.Background(), etcdlease.NewCluster(observer, prefix(t)), "server-a", "")
	if !errors.Is(err, leadership.ErrStillRunning) || got.Revoked {
		t.Fatalf("Reclaim of a running process = %+v, %v; want ErrStillRunning", got, err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(child.Process.Pid)) {
		t.Fatalf("the refusal does not name pid %d: %v", child.Process.Pid, err)
	}
	if !leaseAlive(t, observer, lease) {
		t.Fatal("Reclaim revoked a running process's lease")
	}
	if l, ok, err := etcdlease.NewCluster(observer, prefix(t)).Leader(context.Background(), "aggregator"); err != nil || !ok || l.Token != token {
		t.Fatalf("leader after the refused reclaim = %+v, %v, %v; want token %d", l, ok, err, token)
	}
}

// Only the host that ran the process can tell that it is gone.
func TestDeathReclaimRefusesAnotherHostsRegistration(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcd.Client(t)
	s := startSession(t, etcd.Client(t), "server-a", withHost("host-1"))
	got, err := leadership.Reclaim(context.Background(), etcdlease.NewCluster(observer, prefix(t)), "server-a", "host-2")
	if !errors.Is(err, leadership.ErrOtherHost) || got.Revoked || !strings.Contains(err.Error(), `"host-1"`) {
		t.Fatalf("Reclaim from host-2 = %+v, %v; want ErrOtherHost naming host-1", got, err)
	}
	if !leaseAlive(t, observer, hexLease(t, s.Stats().Lease)) {
		t.Fatal("Reclaim revoked another host's lease")
	}
	if got, err := leadership.Reclaim(context.Background(), etcdlease.NewCluster(observer, prefix(t)), "server-z", "host-1"); err != nil || got.Found {
		t.Fatalf("Reclaim of an instance with no registration = %+v, %v; want nothing to do", got, err)
	}
}
