package leadership

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// A registration names its process by PID and start time. When the PID now
// belongs to another process (the kernel reused it), the registered process is
// gone: Reclaim revokes its lease, and leaves the process now using the PID
// alone. The same registration with that process's true start time names a
// running process, and is refused.
func TestDeathReclaimTellsAReusedPIDFromTheRegisteredProcess(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	host, _ := os.Hostname()
	pid := os.Getpid() // a running process: this one
	start, err := processStart(pid)
	if err != nil {
		t.Fatal(err)
	}
	register := func(name string, procStart uint64) clientv3.LeaseID {
		t.Helper()
		return registerAs(t, cli, Registration{Instance: name, Host: host, PID: pid, ProcStart: procStart, PIDNamespace: pidNamespace()})
	}
	alive := func(id clientv3.LeaseID) bool { return leaseLives(t, cli, id) }

	reused := register("reused", start-1) // started earlier than the process now at pid
	got, err := Reclaim(context.Background(), cli, "/reuse", "reused", host)
	if err != nil || !got.Revoked {
		t.Fatalf("Reclaim of a registration whose pid was reused = %+v, %v; want its lease revoked", got, err)
	}
	if alive(reused) {
		t.Fatal("the lease of the gone process is alive")
	}

	running := register("running", start)
	got, err = Reclaim(context.Background(), cli, "/reuse", "running", host)
	if !errors.Is(err, ErrStillRunning) || got.Revoked || !alive(running) {
		t.Fatalf("Reclaim of a running process's registration = %+v, %v, lease alive %v; want it refused and left alone", got, err, alive(running))
	}
}

// A PID means a process only in its PID namespace: a registration written
// in another (a container's) is left alone, even when its PID names no
// process here.
func TestDeathReclaimLeavesAnotherPIDNamespacesRegistrationAlone(t *testing.T) {
	t.Parallel()
	if pidNamespace() == "" {
		t.Fatal("/proc/self/ns/pid is unreadable: the PID namespace check cannot be shown")
	}
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	host, _ := os.Hostname()
	lease := registerAs(t, cli, Registration{Instance: "contained", Host: host, PID: 1 << 30, PIDNamespace: "pid:[1]"})
	got, err := Reclaim(context.Background(), cli, "/reuse", "contained", host)
	if !errors.Is(err, ErrOtherPIDNamespace) || got.Revoked || !leaseLives(t, cli, lease) {
		t.Fatalf("Reclaim of another PID namespace's registration = %+v, %v; want it refused and left alone", got, err)
	}
}

// registerAs writes r under /reuse on a new lease, as a session would.
func registerAs(t *testing.T, cli *clientv3.Client, r Registration) clientv3.LeaseID {
	t.Helper()
	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	r.Started, r.Lease = time.Now(), int64(lease.ID)
	v, _ := json.Marshal(r)
	if _, err := cli.Put(context.Background(), InstanceKey("/reuse", r.Instance), string(v), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	return lease.ID
}

func leaseLives(t *testing.T, cli *clientv3.Client, id clientv3.LeaseID) bool {
	t.Helper()
	r, err := cli.TimeToLive(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r.TTL > 0
}
