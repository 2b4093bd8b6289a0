package kubelease_test

import (
	"context"
	"errors"
	"testing"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// A process restarted under the same instance name while its predecessor's
// instance Lease is still held takes that Lease only after seeing it
// unchanged for its duration; the predecessor's term had stopped being valid
// before, and the restarted process then takes the job at once.
func TestARestartedProcessWaitsOutItsPredecessor(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	var c cut
	old := start(t, api, ns, "a", cutBy(&c))
	told := won(t, campaign(old, "sweep"))
	c.on.Store(true) // crashed
	fresh := start(t, api, ns, "a")
	tnew := won(t, campaign(fresh, "sweep"))
	waitEnded(t, told)
	if told.Reason() != leadership.ReasonExpired {
		t.Errorf("the predecessor's term ended %q, want %q", told.Reason(), leadership.ReasonExpired)
	}
	if gap := tnew.Started().Sub(told.EndedAt()); gap < margin {
		t.Errorf("the new term started %v after the old one stopped being valid; want at least the margin %v", gap, margin)
	}
	if tnew.Token() != told.Token()+1 {
		t.Errorf("token %d after %d", tnew.Token(), told.Token())
	}
	if n := fresh.Stats().Reclaimed; n != 1 {
		t.Errorf("the restarted process reclaimed %d instance Leases, want 1", n)
	}
}

// A second live process with the same instance name sees the Lease renewed
// while it waits, and stops with a DuplicateInstanceError; the first keeps
// its term.
func TestASecondLiveProcessWithTheSameNameStops(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	first := start(t, api, ns, "a")
	term := won(t, campaign(first, "sweep"))
	second, err := kubelease.NewSession(kubelease.Config{Client: clientset(t, api.Config()).CoordinationV1(), Namespace: ns, Instance: "a",
		TTL: ttl, Margin: margin, RenewInterval: renew, Logger: benchtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	err = second.WaitReady(ctx)
	var dup *kubelease.DuplicateInstanceError
	if !errors.As(err, &dup) {
		t.Fatalf("the second process: %v, want a DuplicateInstanceError", err)
	}
	if !term.Valid() {
		t.Error("the first process's term ended")
	}
}
