package clusterview_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/snip/snip-jobs/app/clusterview"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }

// An instance is up since its process started, not since its lease: what
// status shows of it stays put when its lease is lost and a new one opened,
// as a SIGCONT after a pause past the TTL does. On both backends.
func TestAnInstanceIsUpSinceItsProcessStartedNotSinceItsLease(t *testing.T) {
	testStart := time.Now()
	t.Parallel()
	jobtest.EachBackend(t, func(t *testing.T, b jobtest.Backend) {
		c := jobtest.NewClusterOn(t, b)
		reg := jobtest.Registry(t, scheduler.Type{Name: "idle", New: func(scheduler.Env, configs.Job) (scheduler.Job, error) {
			return scheduler.JobFunc(func(ctx context.Context, _ *scheduler.Run) error { <-ctx.Done(); return nil }), nil
		}})
		c.Start("server-1", reg, []configs.Job{jobtest.Continuous("idle", "idle")})
		read := clusterview.Etcd(c.Obs, c.Prefix)
		if b == jobtest.Kubernetes {
			read = clusterview.Kube(c.Leases, c.Namespace, c.Prefix, time.Now)
		}
		instance := func() status.Instance {
			t.Helper()
			l, err := read(context.Background())
			if err != nil || len(l.Instances) != 1 {
				t.Fatalf("the cluster's instances: %+v, %v", l.Instances, err)
			}
			return l.Instances[0]
		}
		before := instance()
		if before.Started.IsZero() || before.Started.After(testStart) {
			t.Errorf("server-1 is up since %v; this process started before the test did, at %v", before.Started, testStart)
		}
		c.Revoke("server-1")
		var after status.Instance
		c.WaitKeys("server-1 registered on a new lease", func() bool {
			l, err := read(context.Background())
			// etcd names a new lease; Kubernetes a new holder of the same Lease.
			if err != nil || len(l.Instances) != 1 || l.Instances[0].Lease+l.Instances[0].Holder == before.Lease+before.Holder {
				return false
			}
			after = l.Instances[0]
			return true
		})
		if !after.Started.Equal(before.Started) {
			t.Errorf("after a new lease server-1 is up since %v, before since %v: its process did not restart", after.Started, before.Started)
		}
	})
}
