package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/chaos"
	"github.com/snip/snip-jobs/testbench/releases"
)

// A rolling upgrade, as docs/operations.md says to do it, from the previous
// release (built from this repository's history: the commit before the
// newest migration) to this one, under load: three instances of the previous
// release; `snip-jobs migrate` with the new binary; each server restarted with
// the new binary, one at a time, `snip-jobs status` checked between them. The
// old and new binaries run side by side on the migrated schema meanwhile, and
// every invariant of the fault-injection checker holds over the whole run:
// no stale write accepted, counts exact, one report per week. Without the
// history (a shallow clone) the test fails and says so.
func TestARollingUpgradeFromThePreviousReleaseKeepsEveryInvariant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	commit, err := releases.Previous(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old, err := releases.SnipJobs(ctx, commit)
	if err != nil {
		t.Fatalf("build the previous release %s: %v", commit, err)
	}
	t.Logf("previous release: %s (%s)", commit, old)
	// A 4 s lease: the previous release logs in to etcd for every
	// keep-alive, which is slow under auth (fixed since).
	// AwaitReport: the previous release stores this week's report before the
	// upgrade starts; leaders of both releases must leave it at one.
	rep, err := chaos.Upgrade(ctx, chaos.Options{TTL: 4 * time.Second, AwaitReport: true, Binary: snipJobs(t), Log: benchtest.Logger(t)}, old)
	if err != nil {
		t.Fatalf("the upgrade could not be done: %v", err)
	}
	t.Logf("report:\n%s", rep.Markdown())
	for _, v := range rep.Violations {
		t.Errorf("%s: %s", v.Invariant, v.Detail)
	}
	if u := rep.Upgrade; u.SchemaAfter <= u.SchemaBefore {
		t.Errorf("the new binary's migrate took the schema from version %d to %d: the previous release was not older", u.SchemaBefore, u.SchemaAfter)
	}
	if len(rep.Faults) != 3 {
		t.Fatalf("%d servers restarted, want 3", len(rep.Faults))
	}
	for _, f := range rep.Faults {
		if f.Kind != chaos.UpgradeRestart || f.Err != "" || f.ExitCode != 0 {
			t.Errorf("upgrading %s: %s, exit %d, %s", f.Target, f.Kind, f.ExitCode, f.Err)
		}
	}
	if rep.Reports.Reports != 1 {
		t.Errorf("%d weekly reports stored, want the one the previous release stored", rep.Reports.Reports)
	}
	if rep.Counts == nil || rep.Counts.Valid == 0 {
		t.Errorf("the click counts were not checked against any event: %+v", rep.Counts)
	}
	if rep.Probe.Terms < 2 {
		t.Errorf("the probe's writes came from %d term(s): no hand-over happened", rep.Probe.Terms)
	}
}
