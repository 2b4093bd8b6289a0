package kubelease_test

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
)

// A resigned term's job goes to the waiting session at once: the successor
// wins while the resigner's instance Lease is still renewed, so it cannot
// have waited out the lease duration (it marked no instance Lease expired).
func TestResignHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	a := start(t, api, ns, "a")
	b, bst := startStore(t, api, ns, "b")
	ta := won(t, campaign(a, "certs"))
	wb := campaign(b, "certs")
	waitWaiting(t, b)
	if err := ta.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	tb := won(t, wb)
	if tb.Token() != ta.Token()+1 {
		t.Errorf("successor's token %d, want %d", tb.Token(), ta.Token()+1)
	}
	if tb.Started().Before(ta.EndedAt()) {
		t.Errorf("successor started before the resigned term ended")
	}
	if n := bst.Expired(); n != 0 {
		t.Errorf("the successor marked %d instance Leases expired; a resign needs none", n)
	}
	st := a.Stats()
	if st.LeasesGranted != 1 || st.Headroom == 0 {
		t.Errorf("the resigner's instance Lease lapsed (%+v): the hand-over may have waited for it", st)
	}
	if ta.Reason() != leadership.ReasonResigned || !tb.Valid() {
		t.Errorf("resigned term reason %q, successor valid %v", ta.Reason(), tb.Valid())
	}
}

// A leader whose renewals stop (its client cut off: a crash, as far as the
// API server can tell) is replaced only after the survivor has seen its
// instance Lease unchanged for the lease duration. The old term stopped being
// valid (its deadline) before the new one was granted, by at least the
// margin, on this process's monotonic clock; the old term ended by expiry.
func TestACrashedLeaderIsReplacedOnlyAfterItsDeadline(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	var c cut
	a := start(t, api, ns, "a", cutBy(&c))
	b, bst := startStore(t, api, ns, "b")
	ta := won(t, campaign(a, "aggregate"))
	wb := campaign(b, "aggregate")
	waitWaiting(t, b)
	c.on.Store(true)
	tb := won(t, wb)
	if !tb.Valid() || tb.Token() <= ta.Token() {
		t.Fatalf("new term valid %v, token %d after %d", tb.Valid(), tb.Token(), ta.Token())
	}
	if ta.Valid() {
		t.Fatal("the crashed leader's term is still valid after its successor was granted")
	}
	waitEnded(t, ta)
	if ta.Reason() != leadership.ReasonExpired {
		t.Errorf("the crashed leader's term ended %q, want %q", ta.Reason(), leadership.ReasonExpired)
	}
	if gap := tb.Started().Sub(ta.EndedAt()); gap < margin {
		t.Errorf("the new term started %v after the old one stopped being valid; the protocol gives at least the margin %v", gap, margin)
	}
	if bst.Expired() != 1 {
		t.Errorf("the survivor marked %d instance Leases expired, want 1", bst.Expired())
	}
}

// Valid does no I/O and allocates nothing: a flag and an atomic word read
// against the monotonic clock. (Not parallel: AllocsPerRun counts the whole
// process.)
func TestValidAllocatesNothing(t *testing.T) {
	a := start(t, api, namespace(t, api), "a")
	term := won(t, campaign(a, "certs"))
	if n := testing.AllocsPerRun(100, func() { term.Valid() }); n != 0 {
		t.Errorf("Valid allocates %v times; it must not", n)
	}
	if !term.Valid() {
		t.Error("a fresh term is not valid")
	}
}

// An operator's fresh token (report rebuild) is the job Lease's count
// bumped under its resourceVersion: above the current term's token, which
// ends at once (its job Lease records a later token), and below the next
// term's. A job never led gets the count's first value.
func TestAFreshTokenIsAboveEveryTermsAndEndsTheCurrentOne(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	cluster := kubelease.NewCluster(clientset(t, api.Config()).CoordinationV1(), ns, "")
	ctx := context.Background()
	if tok, err := cluster.FreshToken(ctx, "never"); err != nil || tok != 1 {
		t.Fatalf("fresh token of a job never led: %d, %v; want 1", tok, err)
	}
	a := start(t, api, ns, "a")
	ta := won(t, campaign(a, "report"))
	fresh, err := cluster.FreshToken(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if fresh <= ta.Token() {
		t.Fatalf("fresh token %d not above the current term's %d", fresh, ta.Token())
	}
	waitEnded(t, ta)
	if ta.Reason() != leadership.ReasonKeyLost {
		t.Errorf("the term ended %q, want %q", ta.Reason(), leadership.ReasonKeyLost)
	}
	next := won(t, campaign(a, "report"))
	if next.Token() <= fresh {
		t.Errorf("the next term's token %d is not above the fresh token %d", next.Token(), fresh)
	}
}

// A campaign given up while its winning write is on its way (the API
// server commits it; the answer comes after the campaign's context ended,
// as a pause or a drain ends it) leaves the job free: Campaign says the
// context ended, and the job Lease names no holder (else the other
// instance would wait for the first, which goes on renewing its instance
// Lease).
func TestACampaignGivenUpAsItsWriteWinsLeavesTheJobFree(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	ctx, giveUp := context.WithCancel(context.Background())
	a := start(t, api, ns, "a", onWrite("-job-", func(ctx context.Context) error { giveUp(); return ctx.Err() }))
	b := start(t, api, ns, "b")
	if term, err := a.Campaign(ctx, "pulse"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a campaign given up as its write won: term %v, %v; want the context's end", term, err)
	}
	l, err := clientset(t, api.Config()).CoordinationV1().Leases(ns).Get(context.Background(), kubelease.DefaultPrefix+"-job-pulse", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		t.Fatalf("the job Lease after the campaign was given up: %+v, %v; want it written and released", l, err)
	}
	if tb := won(t, campaign(b, "pulse")); tb.Token() < 2 {
		t.Errorf("the other instance won token %d; want one above the given-up win's", tb.Token())
	}
}
