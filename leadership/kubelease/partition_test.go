package kubelease_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/internal/conformance"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/faultproxy"
)

// A leader cut off from the API server by a network partition (a fault
// proxy holding every byte both ways, watches included; the process runs
// on) stops treating its term as valid before its successor's term starts,
// by at least the margin on this process's clock. When the partition heals
// its held bytes reach the API server late and change nothing: the old
// token's write is refused by the fence on real PostgreSQL, the successor's
// term stays valid, and the healed session takes a new instance Lease and
// waits for the job like any other candidate.
func TestALeaderCutFromTheAPIServerIsReplacedAndFencedAfterTheHeal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, pool := dbtest.New(t)
	insert := conformance.Reports(t, pool)
	p, err := faultproxy.New(strings.TrimPrefix(api.URL(), "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ns := namespace(t, api)
	a := start(t, api, ns, "a", through(p))
	b := start(t, api, ns, "b")
	ta := won(t, campaign(a, "weekly"))
	fa, fb := fencing.New(pool, "a"), fencing.New(pool, "b")
	if err := fa.Do(ctx, "weekly", ta.Token(), insert(ta.Token(), "a before the partition")); err != nil {
		t.Fatal(err)
	}
	wb := campaign(b, "weekly")
	waitWaiting(t, b)

	p.Partition(true)
	tb := won(t, wb)
	if ta.Valid() || tb.Token() <= ta.Token() {
		t.Fatalf("after the takeover: the cut-off term valid %v; tokens %d then %d", ta.Valid(), ta.Token(), tb.Token())
	}
	waitEnded(t, ta)
	if ta.Reason() != leadership.ReasonExpired {
		t.Errorf("the cut-off term ended %q, want %q", ta.Reason(), leadership.ReasonExpired)
	}
	if gap := tb.Started().Sub(ta.EndedAt()); gap < margin {
		t.Errorf("the successor's term started %v after the cut-off one stopped being valid; the protocol gives at least the margin %v", gap, margin)
	}
	if err := fb.Do(ctx, "weekly", tb.Token(), insert(tb.Token(), "b")); err != nil {
		t.Fatal(err)
	}

	p.Partition(false)
	benchtest.WaitChange(t, "a's session holding a new instance Lease after the heal", a.StatsChanged,
		func() bool { return a.Stats().LeasesGranted == 2 && a.Stats().Headroom > 0 })
	err = fa.Do(ctx, "weekly", ta.Token(), insert(ta.Token(), "a after the heal"))
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("the cut-off leader's write after the heal: %v, want %v", err, fencing.ErrStaleToken)
	}
	again := campaign(a, "weekly")
	waitWaiting(t, a)
	if !tb.Valid() {
		t.Errorf("the successor's term ended (%v) after the partition healed", tb.Err())
	}
	select {
	case r := <-again:
		t.Fatalf("a's new campaign returned while b leads: term %v, err %v", r.t, r.err)
	default:
	}
	if n := benchtest.Value[int](t, pool, "SELECT count(*) FROM reports WHERE body = 'a after the heal'"); n != 0 {
		t.Errorf("the stale write left %d rows", n)
	}
}

// through sends the session's requests through the fault proxy p.
func through(p *faultproxy.Proxy) sessionOpt {
	return func(_ *kubelease.Config, rc *rest.Config) { rc.Host = "https://" + p.Addr() }
}
