package etcdlease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// A process paused between etcd's "you won" and looking at the answer can wake
// after its lease's deadline. That win must not become a term: the campaign
// goes on and wins again on a live lease, with a new, higher token.
func TestWinAnsweredAfterTheDeadlineYieldsNoTerm(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	link := etcd.Proxy(t, 0)
	var st *store
	s, st := hookedSession(t, Config{Client: etcd.Client(t, link.Endpoint()), Prefix: "/pause-test", Config: leadership.Config{
		Instance: "paused", TTL: 2 * time.Second, Margin: 500 * time.Millisecond,
	}}, func(*store) {})
	first := s.Stats().Lease

	var pauses atomic.Int32
	st.afterWinTxn = func() {
		if pauses.Add(1) == 1 {
			// The whole process stalls (here: its traffic is cut, so keep-alives
			// fail) until the deadline of the lease used for this win has passed.
			link.Blackhole()
			for ch := s.StatsChanged(); s.Stats().Lease == first; ch = s.StatsChanged() {
				<-ch // the session's signal: a lease ended or began
			}
			link.Unblackhole()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	term, err := s.Campaign(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if pauses.Load() < 2 {
		t.Fatalf("campaign returned after %d wins; the win answered after the deadline was not discarded", pauses.Load())
	}
	if term.Lease() == first {
		t.Fatal("the term is on the lease whose deadline passed during the pause")
	}
	if !term.Valid() {
		t.Fatal("the term returned is not valid")
	}
}
