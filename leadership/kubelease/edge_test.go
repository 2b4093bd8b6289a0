package kubelease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// A job Lease rewritten by someone else (an operator naming another holder)
// ends the term that it recorded: its watch sees the change.
func TestAJobLeaseRewrittenUnderATermEndsIt(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	a := start(t, api, ns, "a")
	term := won(t, campaign(a, "report"))
	leases := clientset(t, api.Config()).CoordinationV1().Leases(ns)
	jl, err := leases.Get(context.Background(), kubelease.DefaultPrefix+"-job-report", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := "someone/else"
	jl.Spec.HolderIdentity = &other
	if _, err := leases.Update(context.Background(), jl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, term)
	if term.Reason() != leadership.ReasonKeyLost || term.Valid() {
		t.Errorf("term ended %q (valid %v), want %q", term.Reason(), term.Valid(), leadership.ReasonKeyLost)
	}
}

// leadership.WithHoldback's wait runs before every attempt: the first, and
// the one after the holder resigned.
func TestHoldbackRunsBeforeEveryAttempt(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	a := start(t, api, ns, "a")
	b, bst := startStore(t, api, ns, "b")
	ta := won(t, campaign(a, "report"))
	// Otherwise b's first attempt may write against a Lease it has not seen
	// taken, lose, and (rightly) hold back again.
	seen, cancel := context.WithTimeout(t.Context(), benchtest.Patience)
	defer cancel()
	if err := bst.WaitHeldSeen(seen, "report"); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	got := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tb, err := b.Campaign(ctx, "report", leadership.WithHoldback(func() time.Duration {
			calls.Add(1)
			return time.Millisecond
		}))
		got <- result{tb, err}
	}()
	waitWaiting(t, b)
	if n := calls.Load(); n != 1 {
		t.Fatalf("holdback ran %d times before the first attempt, want 1", n)
	}
	if err := ta.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	won(t, got)
	if n := calls.Load(); n != 2 {
		t.Errorf("holdback ran %d times, want 2 (first attempt, and after the holder went)", n)
	}
}

// A win answered after the instance Lease's deadline (the process paused
// between the write and the check, its renewals failing meanwhile) yields no
// term: the campaign goes on and, once the session has its Lease again,
// wins a new term with the next token, valid when returned.
func TestAWinAnsweredAfterTheDeadlineYieldsNoTerm(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	var c cut
	a, ast := startStore(t, api, ns, "a", cutBy(&c))
	var paused atomic.Bool
	ast.SetAfterWin(func() {
		if paused.Swap(true) {
			return
		}
		c.on.Store(true) // renewals fail from here
		// Wait until the instance Lease's deadline has passed.
		for {
			ch := a.StatsChanged()
			if a.Stats().LeaseEnds[leadership.ReasonExpired] > 0 {
				break
			}
			<-ch
		}
		c.on.Store(false)
	})
	term := won(t, campaign(a, "report"))
	if !paused.Load() {
		t.Fatal("the hook did not run")
	}
	if term.Token() != 2 || !term.Valid() {
		t.Errorf("the term returned has token %d (valid %v); the win at token 1 came after the deadline and must not count", term.Token(), term.Valid())
	}
	if n := a.Stats().LeasesGranted; n != 2 {
		t.Errorf("%d instance Lease incarnations, want 2 (the term is on the second)", n)
	}
}
