package leadership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Death reclaim: when a process that holds terms dies and its host lives, the
// host knows at once that it is gone, where etcd would wait out its lease. A
// supervisor on that host (systemd's ExecStopPost=, snip-dev, the chaos
// harness) calls Reclaim once it has seen the process exit; Reclaim revokes
// the dead process's lease after proving, from its registration's PID and
// start time, that the process is gone. Its leader keys go with the lease, so
// its jobs move at once. docs/safety.md gives the argument.

// ErrStillRunning is wrapped by Reclaim's error when the registration names a
// process of this host that is running: its lease is left alone.
var ErrStillRunning = errors.New("leadership: the registered process is still running")

// ErrOtherHost is wrapped by Reclaim's error when the registration is another
// host's: this host cannot tell whether that process lives.
var ErrOtherHost = errors.New("leadership: the registration is another host's")

// ErrOtherPIDNamespace is wrapped by Reclaim's error when the registration's
// PID is in another PID namespace (a container): that PID names another
// process here, if any.
var ErrOtherPIDNamespace = errors.New("leadership: the registration's PID is in another PID namespace")

// Reclaimed is what Reclaim found and did.
type Reclaimed struct {
	// Found: a registration of the instance was there; Registration is it.
	Found        bool
	Registration Registration
	// Revoked: its process was proven gone and its lease revoked (or etcd
	// no longer had it).
	Revoked bool
}

// Reclaim revokes the lease of instance's registration under prefix if the
// registration was written by a process of this host (host: the name the
// session was given, by default os.Hostname) that is no longer running. No
// registration (the process revoked its lease on its way out, or the lease
// expired) is nothing to do. A registration by a process that runs, or by
// another host, or from another PID namespace, is refused (ErrStillRunning,
// ErrOtherHost, ErrOtherPIDNamespace) and left alone.
//
// It revokes only the lease the registration sits on: the process wrote its
// own registration on its own lease, so that lease is the dead process's.
func Reclaim(ctx context.Context, cli *clientv3.Client, prefix, instance, host string) (Reclaimed, error) {
	if err := checkName("instance", instance); err != nil {
		return Reclaimed{}, err
	}
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			return Reclaimed{}, fmt.Errorf("leadership: reclaim %s: the host name is unknown: %w", instance, err)
		}
		host = h
	}
	key := InstanceKey(prefix, instance)
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return Reclaimed{}, fmt.Errorf("leadership: reclaim %s: read %s: %w", instance, key, err)
	}
	if len(resp.Kvs) == 0 {
		return Reclaimed{}, nil
	}
	kv := resp.Kvs[0]
	var reg Registration
	if err := json.Unmarshal(kv.Value, &reg); err != nil {
		return Reclaimed{}, fmt.Errorf("leadership: reclaim %s: unreadable registration at %s: %w", instance, key, err)
	}
	out := Reclaimed{Found: true, Registration: reg}
	switch {
	case reg.Host != host:
		return out, fmt.Errorf("%w: instance %s is registered by host %q (pid %d), this is %q", ErrOtherHost, instance, reg.Host, reg.PID, host)
	case reg.PIDNamespace != "" && reg.PIDNamespace != pidNamespace():
		return out, fmt.Errorf("%w: instance %s is pid %d in %s, this is %s", ErrOtherPIDNamespace, instance, reg.PID, reg.PIDNamespace, pidNamespace())
	case processAlive(reg.PID, reg.ProcStart):
		return out, fmt.Errorf("%w: instance %s is pid %d on this host, started at tick %d", ErrStillRunning, instance, reg.PID, reg.ProcStart)
	}
	if kv.Lease == 0 {
		return out, fmt.Errorf("leadership: reclaim %s: the registration at %s has no lease", instance, key)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return out, fmt.Errorf("leadership: reclaim %s: revoke lease %x of dead pid %d: %w", instance, kv.Lease, reg.PID, err)
	}
	out.Revoked = true
	return out, nil
}
