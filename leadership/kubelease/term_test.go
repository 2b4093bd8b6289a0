package kubelease_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
)

type span struct {
	who        string
	token      int64
	start, end time.Time
}

// Two sessions take turns leading one job, each handing over only once the
// other is waiting: at most one term at a time (each term starts after the
// previous one stopped being valid, on this process's monotonic clock), and
// the tokens strictly increase across the hand-overs.
func TestTwoSessionsHoldOneTermAtATimeAndTokensGrow(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	a, b := start(t, api, ns, "a"), start(t, api, ns, "b")
	const rounds = 3
	var mu sync.Mutex
	var spans []span
	done := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	run := func(me, other *kubelease.Session, errs chan<- error) {
		defer close(done[me.Instance()])
		for range rounds {
			term, err := me.Campaign(context.Background(), "report")
			if err != nil {
				errs <- err
				return
			}
			if !term.Valid() {
				errs <- &leadership.EndedError{Reason: term.Reason(), Detail: "granted an invalid term"}
			}
			// Hold the term until the other session waits for it (or has finished).
			for {
				ch := other.StatsChanged()
				if other.Stats().Waiting > 0 {
					break
				}
				select {
				case <-ch:
					continue
				case <-done[other.Instance()]:
				}
				break
			}
			if err := term.Resign(context.Background()); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			spans = append(spans, span{me.Instance(), term.Token(), term.Started(), term.EndedAt()})
			mu.Unlock()
		}
	}
	errs := make(chan error, 2*rounds)
	go run(a, b, errs)
	go run(b, a, errs)
	<-done["a"]
	<-done["b"]
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	slices.SortFunc(spans, func(x, y span) int { return x.start.Compare(y.start) })
	if len(spans) != 2*rounds {
		t.Fatalf("%d terms, want %d", len(spans), 2*rounds)
	}
	for i := 1; i < len(spans); i++ {
		p, c := spans[i-1], spans[i]
		if c.token <= p.token {
			t.Errorf("term %d of %s has token %d, not above the previous term's %d (%s)", i, c.who, c.token, p.token, p.who)
		}
		if c.start.Before(p.end) {
			t.Errorf("term %d (%s, token %d) started %v before the previous term (%s, token %d) ended", i, c.who, c.token, p.end.Sub(c.start), p.who, p.token)
		}
	}
}

// A resigned term's job goes to the waiting session at once: the successor
// wins while the resigner's instance Lease is still renewed, so it cannot
// have waited out the lease duration (it marked no instance Lease expired).
func TestResignHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	a, b := start(t, api, ns, "a"), start(t, api, ns, "b")
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
	if n := b.Expired(); n != 0 {
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
	b := start(t, api, ns, "b")
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
	if b.Expired() != 1 {
		t.Errorf("the survivor marked %d instance Leases expired, want 1", b.Expired())
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
