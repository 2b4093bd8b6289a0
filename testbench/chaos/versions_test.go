package chaos_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/snip/snip-jobs/app/etcdversion"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/chaos"
	"github.com/snip/snip-jobs/testbench/releases"
)

// The guarantee's faults — a leader SIGKILLed (crash takeover) and SIGSTOPped
// past its TTL (pause, then the fence), the etcd leader killed, etcd's quorum
// lost, both followers lost with the raft leader left alone — against real
// etcd server processes (etcd's own binary, built from the module proxy) of
// the oldest supported release of each supported line (etcdversion.Minimum,
// docs/operations.md): every invariant holds.
func TestTheGuaranteeHoldsOnTheOldestSupportedEtcdOfEachLine(t *testing.T) {
	t.Parallel()
	kinds := []chaos.Kind{chaos.KillLeader, chaos.PauseLeader, chaos.EtcdLeaderLoss, chaos.QuorumLoss, chaos.FollowersLoss}
	for _, m := range etcdversion.Minimum {
		version := fmt.Sprintf("%d.%d.%d", m[0], m[1], m[2])
		t.Run("etcd "+version, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			bin, err := releases.Etcd(ctx, version)
			if err != nil {
				t.Fatalf("build etcd %s: %v", version, err)
			}
			rep, err := chaos.Run(ctx, chaos.Options{Faults: len(kinds), Kinds: kinds, EtcdBinary: bin, Binary: snipJobs(t), Log: benchtest.Logger(t)})
			if err != nil {
				t.Fatalf("the run could not be done: %v", err)
			}
			t.Logf("report:\n%s", rep.Markdown())
			if rep.EtcdVersion != version {
				t.Errorf("the members run etcd %q, want %s", rep.EtcdVersion, version)
			}
			for _, v := range rep.Violations {
				t.Errorf("%s: %s", v.Invariant, v.Detail)
			}
			injected := map[chaos.Kind]bool{}
			for _, f := range rep.Faults {
				injected[f.Kind] = true
			}
			for _, k := range kinds {
				if !injected[k] {
					t.Errorf("no %s fault was injected", k)
				}
			}
			if rep.Probe.Terms < 2 {
				t.Errorf("the probe's writes came from %d term(s): leadership was not exercised", rep.Probe.Terms)
			}
		})
	}
}
