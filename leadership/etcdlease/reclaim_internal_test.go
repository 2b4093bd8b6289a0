package etcdlease

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
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
	me := leadership.ThisProcess(host) // a running process: this one
	if me.Start == 0 {
		t.Fatal("/proc/self/stat is unreadable: this process's start time is unknown")
	}
	pid, start := me.PID, me.Start
	register := func(name string, procStart uint64) clientv3.LeaseID {
		t.Helper()
		return registerAs(t, cli, record{Instance: name, Host: host, PID: pid, ProcStart: procStart, PIDNS: me.PIDNamespace})
	}
	alive := func(id clientv3.LeaseID) bool { return leaseLives(t, cli, id) }

	reused := register("reused", start-1) // started earlier than the process now at pid
	got, err := leadership.Reclaim(context.Background(), NewCluster(cli, "/reuse"), "reused", host)
	if err != nil || !got.Revoked {
		t.Fatalf("Reclaim of a registration whose pid was reused = %+v, %v; want its lease revoked", got, err)
	}
	if alive(reused) {
		t.Fatal("the lease of the gone process is alive")
	}

	running := register("running", start)
	got, err = leadership.Reclaim(context.Background(), NewCluster(cli, "/reuse"), "running", host)
	if !errors.Is(err, leadership.ErrStillRunning) || got.Revoked || !alive(running) {
		t.Fatalf("Reclaim of a running process's registration = %+v, %v, lease alive %v; want it refused and left alone", got, err, alive(running))
	}
}

// A PID means a process only in its PID namespace: a registration written
// in another (a container's) is left alone, even when its PID names no
// process here.
func TestDeathReclaimLeavesAnotherPIDNamespacesRegistrationAlone(t *testing.T) {
	t.Parallel()
	if leadership.ThisProcess("").PIDNamespace == "" {
		t.Fatal("/proc/self/ns/pid is unreadable: the PID namespace check cannot be shown")
	}
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	host, _ := os.Hostname()
	lease := registerAs(t, cli, record{Instance: "contained", Host: host, PID: 1 << 30, PIDNS: "pid:[1]"})
	got, err := leadership.Reclaim(context.Background(), NewCluster(cli, "/reuse"), "contained", host)
	if !errors.Is(err, leadership.ErrOtherPIDNamespace) || got.Revoked || !leaseLives(t, cli, lease) {
		t.Fatalf("Reclaim of another PID namespace's registration = %+v, %v; want it refused and left alone", got, err)
	}
}

// registerAs writes r under /reuse on a new lease, as a session would.
func registerAs(t *testing.T, cli *clientv3.Client, r record) clientv3.LeaseID {
	t.Helper()
	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	r.Started, r.Lease = time.Now(), int64(lease.ID)
	v, _ := json.Marshal(r)
	if _, err := cli.Put(context.Background(), layout.InstanceKey("/reuse", r.Instance), string(v), clientv3.WithLease(lease.ID)); err != nil {
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
