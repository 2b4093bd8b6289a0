package etcdlease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// 1. Several candidates, many rounds: at most one valid term per job at any
// instant, and tokens strictly increase.
func TestAtMostOneTermPerJobOverManyRounds(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	jobs := []string{"cert-renewer", "aggregator"}
	const rounds = 40
	book := newLedger()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		s := startSession(t, etcd.Client(t), fmt.Sprintf("server-%d", i))
		for _, job := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil && book.count(job) < rounds {
					term, err := s.Campaign(ctx, job)
					if err != nil {
						return
					}
					book.granted(t, term)
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // "work"
					if !term.Valid() {
						checkEndedByLoad(t, term)
					}
					rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
					if err := term.Resign(rctx); err != nil {
						t.Errorf("resign: %v", err)
					}
					rcancel()
				}
			}()
		}
	}
	book.waitFor(t, "every job to pass through enough terms", func() bool {
		for _, job := range jobs {
			if book.count(job) < rounds {
				return false
			}
		}
		return true
	})
	cancel()
	wg.Wait()
	book.checkNoOverlap(t)
	if t.Failed() {
		t.Log(book)
	}
}

// checkEndedByLoad accepts a term that ended during its short work only when
// its lease lapsed: on a loaded machine a keep-alive can miss the deadline,
// which is the session doing its job, not a second leader. Any other end (the
// key deleted or changed under it) is a failure.
func checkEndedByLoad(t *testing.T, term *leadership.Term) {
	t.Helper()
	switch r := term.Reason(); r {
	case leadership.ReasonExpired, leadership.ReasonLeaseLost:
		t.Logf("term %s/%d ended during its work because its lease lapsed (a loaded machine): %v", term.Job(), term.Token(), term.Err())
	default:
		t.Errorf("term %s/%d ended during its work: %s: %v", term.Job(), term.Token(), r, term.Err())
	}
}

// 2. Crash: keep-alives stop and nothing is revoked. The successor's term
// starts only after the old term's context ended and after etcd expired the old
// lease.
func TestCrashedLeaderIsReplacedAfterItsLeaseExpires(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcd.Client(t)
	crashing := etcd.Client(t)
	a := startSession(t, crashing, "server-a")
	b := startSession(t, etcd.Client(t), "server-b")
	book := newLedger()

	old := mustWin(t, a, "cert-renewer")
	book.granted(t, old)
	next := campaign(context.Background(), b, "cert-renewer")

	_ = crashing.Close() // the process "dies": no keep-alive, no revoke
	successor := await(t, next, "server-b")
	book.granted(t, successor)

	if leaseAlive(t, observer, leaseOf(t, old)) {
		t.Fatal("successor won while the crashed leader's lease still existed")
	}
	if old.Context().Err() == nil {
		t.Fatal("successor won while the crashed leader's term context was still live")
	}
	if got := old.Reason(); got != leadership.ReasonExpired {
		t.Fatalf("old term ended with %q, want %q", got, leadership.ReasonExpired)
	}
	if !old.EndedAt().Before(successor.Started()) {
		t.Fatalf("old term ended at %v, not before the successor started (%v)", old.EndedAt(), successor.Started())
	}
	if successor.Token() <= old.Token() {
		t.Fatalf("successor token %d not above %d", successor.Token(), old.Token())
	}
	book.checkNoOverlap(t)
}

// 3. A leader cut off from etcd (partition or pause) for longer than the TTL:
// its term ends at its deadline while etcd still holds the lease; the successor
// starts after; when traffic returns the old term stays dead.
func TestPartitionedLeaderStopsBeforeEtcdExpiresItsLease(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcd.Client(t)
	link := etcd.Proxy(t, 0)
	// etcd reports a lease's time left in whole seconds, truncated: a margin of
	// 1.5 s makes "at least a second left at etcd" observable.
	opts := []option{withTTL(4*time.Second, 1500*time.Millisecond), withRenew(time.Second)}
	a := startSession(t, etcd.Client(t, link.Endpoint()), "server-a", opts...)
	b := startSession(t, etcd.Client(t), "server-b", opts...)
	book := newLedger()

	old := mustWin(t, a, "aggregator")
	book.granted(t, old)
	next := campaign(context.Background(), b, "aggregator")

	// At the moment the old term ends, ask etcd how long the lease has left.
	leftAtEnd := make(chan int64, 1)
	context.AfterFunc(old.Context(), func() { leftAtEnd <- leaseTTL(t, observer, leaseOf(t, old)) })

	link.Blackhole()
	successor := await(t, next, "server-b")
	book.granted(t, successor)

	if got := waitEnded(t, old); got != leadership.ReasonExpired {
		t.Fatalf("old term ended with %q, want %q", got, leadership.ReasonExpired)
	}
	if left := <-leftAtEnd; left < 1 {
		t.Fatalf("when the old term ended etcd gave its lease %ds: the stop-early margin did not act first", left)
	}
	if !old.EndedAt().Before(successor.Started()) {
		t.Fatal("successor started before the old term ended")
	}

	link.Unblackhole()
	waitStats(t, a, "the partitioned session to get a new lease", func(st leadership.Stats) bool {
		return st.Lease != "" && st.Lease != old.Lease()
	})
	if old.Valid() || old.Context().Err() == nil {
		t.Fatal("the old term came back to life after the partition healed")
	}
	again := campaign(context.Background(), a, "aggregator")
	select {
	case w := <-again:
		t.Fatalf("the healed instance won while the successor leads: %+v", w)
	case <-time.After(2 * testTTL):
	}
	if l, ok, err := etcdlease.NewCluster(observer, prefix(t)).Leader(context.Background(), "aggregator"); err != nil || !ok || l.Token != successor.Token() || l.Instance != "server-b" {
		t.Fatalf("leader after healing = %+v, %v, %v; want server-b with token %d", l, ok, err, successor.Token())
	}
	book.checkNoOverlap(t)
}

// 4. Resign and shutdown hand over at once: the successor wins while the old
// lease still has time left, so it did not wait for expiry.
func TestResignAndShutdownHandOverWithoutWaitingForExpiry(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcd.Client(t)
	slow := withTTL(10*time.Second, 3*time.Second) // expiry would take ~10 s
	a := startSession(t, etcd.Client(t), "server-a", slow)
	b := startSession(t, etcd.Client(t), "server-b", slow)
	c := startSession(t, etcd.Client(t), "server-c", slow)
	book := newLedger()

	first := mustWin(t, a, "weekly-report")
	book.granted(t, first)
	nextB := campaign(context.Background(), b, "weekly-report")
	if err := first.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := await(t, nextB, "server-b")
	book.granted(t, second)
	if !leaseAlive(t, observer, leaseOf(t, first)) {
		t.Fatal("resign: the successor won only after the resigned leader's lease was gone")
	}
	if first.Reason() != leadership.ReasonResigned {
		t.Fatalf("resigned term reason %q", first.Reason())
	}

	nextC := campaign(context.Background(), c, "weekly-report")
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ttl, err := observer.TimeToLive(closeCtx, leaseOf(t, second))
	if err != nil {
		t.Fatal(err)
	}
	expiresBy := time.Now().Add(time.Duration(ttl.TTL) * time.Second) // had it not been revoked
	if err := b.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if second.Reason() != leadership.ReasonShutdown {
		t.Fatalf("closed session's term reason %q", second.Reason())
	}
	third := await(t, nextC, "server-c")
	book.granted(t, third)
	if leaseAlive(t, observer, leaseOf(t, second)) {
		t.Fatal("shutdown did not revoke the lease")
	}
	if !third.Started().Before(expiresBy) {
		t.Fatal("shutdown: the successor won only when the closed session's lease would have expired")
	}
	book.checkNoOverlap(t)
}

// 5. Losing an etcd member, then the etcd leader: etcd keeps its quorum, so the
// term survives both: it stays valid, keeps its token (still the leader key's
// create revision), and no other term is granted. Each session's lease is
// renewed through each loss: a keep-alive sent after the loss is acknowledged.
func TestEtcdMemberAndLeaderLoss(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 3)
	observer := etcd.Client(t)
	// A term stays valid for 7 s after the send time of its newest acknowledged
	// keep-alive, and one goes out every second: a killed etcd leader is
	// replaced after etcd's election timeout (1 s, up to 2 s randomised), so
	// the term has no reason to end.
	opts := []option{withTTL(10*time.Second, 3*time.Second), withRenew(time.Second)}
	a := startSession(t, etcd.Client(t), "server-a", opts...)
	b := startSession(t, etcd.Client(t), "server-b", opts...)
	sessions := []*leadership.Session{a, b}
	book := newLedger()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // no booking after the test has ended

	// Both sessions keep campaigning; every win is booked.
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				term, err := s.Campaign(ctx, "aggregator")
				if err != nil {
					return
				}
				book.granted(t, term)
				select {
				case <-term.Context().Done():
				case <-ctx.Done():
					_ = term.Resign(context.Background())
				}
			}
		}()
	}
	book.waitFor(t, "a first leader", func() bool { return book.count("aggregator") >= 1 })
	term := book.last("aggregator")
	leases := map[*leadership.Session]string{}
	for _, s := range sessions {
		leases[s] = s.Stats().Lease
	}

	// survived checks the claim after a fault injected before since.
	survived := func(fault string, since time.Time) {
		t.Helper()
		for _, s := range sessions {
			// LastRenewal moves only when etcd acknowledges a keep-alive; it is
			// that keep-alive's send time.
			waitStats(t, s, fault+": "+s.Instance()+"'s lease renewed by a keep-alive sent after it", func(st leadership.Stats) bool {
				return st.Lease != leases[s] || st.LastRenewal.After(since)
			})
			if got := s.Stats().Lease; got != leases[s] {
				t.Fatalf("%s: %s's lease %s ended (now %s) although etcd kept its quorum", fault, s.Instance(), leases[s], got)
			}
		}
		if !term.Valid() {
			t.Fatalf("%s: the term with token %d ended (%v) although etcd kept its quorum", fault, term.Token(), term.Err())
		}
		checkLeaderKeyMatches(t, observer, term)
		if n := book.count("aggregator"); n != 1 {
			t.Fatalf("%s: %d terms granted, want the first one only: %s", fault, n, book)
		}
	}

	follower := (etcd.LeaderIndex(t) + 1) % 3
	etcd.Stop(t, follower)
	survived("etcd member loss", time.Now())
	etcd.Restart(t, follower)

	etcd.Kill(t, etcd.LeaderIndex(t))
	survived("etcd leader loss", time.Now())

	cancel()
	wg.Wait()
	book.checkNoOverlap(t)
	t.Logf("terms: %s", book)
}

// checkLeaderKeyMatches: the leader key in etcd carries term's token.
func checkLeaderKeyMatches(t *testing.T, observer *clientv3.Client, term *leadership.Term) {
	t.Helper()
	l, ok, err := etcdlease.NewCluster(observer, prefix(t)).Leader(context.Background(), term.Job())
	if err != nil {
		t.Fatal(err)
	}
	if !ok || l.Token != term.Token() {
		t.Fatalf("term %d is valid but the leader key says %+v (present %v)", term.Token(), l, ok)
	}
}

// 6. Quorum loss: no new term anywhere while 2 of 3 members are down; the
// current term ends by its deadline; after quorum returns a leader is elected.
func TestQuorumLossEndsTermsAndElectsNobodyUntilItReturns(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 3)
	a := startSession(t, etcd.Client(t), "server-a")
	b := startSession(t, etcd.Client(t), "server-b")
	c := startSession(t, etcd.Client(t), "server-c")
	book := newLedger()

	old := mustWin(t, a, "cert-renewer")
	book.granted(t, old)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wins := make(chan won, 3)
	for _, s := range []*leadership.Session{b, c} {
		go func() {
			term, err := s.Campaign(ctx, "cert-renewer")
			wins <- won{term, err}
		}()
	}

	lead := etcd.LeaderIndex(t)
	down := []int{lead, (lead + 1) % 3}
	for _, i := range down {
		etcd.Kill(t, i)
	}
	if got := waitEnded(t, old); got != leadership.ReasonExpired {
		t.Fatalf("term ended with %q during quorum loss, want %q", got, leadership.ReasonExpired)
	}
	// Give the other candidates several TTLs of chance to (wrongly) win.
	select {
	case w := <-wins:
		t.Fatalf("a term was granted without quorum: %+v", w)
	case <-time.After(3 * testTTL):
	}
	again := campaign(ctx, a, "cert-renewer")

	for _, i := range down {
		go etcd.Restart(t, i) // each waits for quorum, which needs both
	}
	var w won
	select {
	case w = <-wins:
	case w = <-again:
	case <-time.After(patience):
		t.Fatal("no leader after quorum returned")
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	book.granted(t, w.term)
	if w.term.Token() <= old.Token() {
		t.Fatalf("new token %d not above %d", w.term.Token(), old.Token())
	}
	book.checkNoOverlap(t)
}

// 7. A campaign that waits while its own lease expires returns no term on that
// lease: it goes on with a fresh lease, and the term it returns is attached to a
// live lease that holds the leader key (etcd issues #19597 and #11456 are about
// concurrency.Election returning a "phantom" win here).
func TestCampaignThatWaitedThroughItsLeaseExpiryGetsNoTermOnIt(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcd.Client(t)
	link := etcd.Proxy(t, 0)
	a := startSession(t, etcd.Client(t), "server-a")
	b := startSession(t, etcd.Client(t, link.Endpoint()), "server-b")

	holder := mustWin(t, a, "weekly-report")
	waiting := campaign(context.Background(), b, "weekly-report")
	first := b.Stats().Lease

	link.Blackhole()
	waitKeys(t, observer, "etcd to expire the waiting candidate's lease (its instance key goes with it)", func() bool { return !leaseAlive(t, observer, hexLease(t, first)) })
	if err := holder.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	link.Unblackhole()

	term := await(t, waiting, "server-b")
	if term.Lease() == first {
		t.Fatalf("campaign returned a term on lease %s, which expired while it waited", first)
	}
	if !term.Valid() || !leaseAlive(t, observer, leaseOf(t, term)) {
		t.Fatal("the term's lease is not alive")
	}
	ls, err := etcdlease.NewCluster(observer, prefix(t)).Leaders(context.Background())
	if err != nil || len(ls) != 1 || ls[0].Lease != leaseOf(t, term) || ls[0].Token != term.Token() || ls[0].Instance != "server-b" {
		t.Fatalf("leader keys = %+v (err %v); want weekly-report's of server-b, lease %s, token %d", ls, err, term.Lease(), term.Token())
	}
}

func TestCampaignForAJobAlreadyHeldIsRefused(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	a := startSession(t, etcd.Client(t), "server-a")
	term := mustWin(t, a, "aggregator")
	if _, err := a.Campaign(context.Background(), "aggregator"); !errors.Is(err, leadership.ErrBusy) {
		t.Fatalf("second campaign: %v, want ErrBusy", err)
	}
	if err := term.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if again := mustWin(t, a, "aggregator"); again.Token() <= term.Token() {
		t.Fatalf("re-won with token %d, not above %d", again.Token(), term.Token())
	}
}

// A term that has ended no longer holds its job in the session: a campaign
// made as soon as Resign returns, or as soon as the term's context is done,
// is not refused with ErrBusy. (The scheduler campaigns again at once; a
// refusal would cost it an error and a second.)
func TestAJobIsFreeToCampaignForAsSoonAsItsTermHasEnded(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	a := startSession(t, cli, "server-a")
	for i := range 100 {
		term := mustWin(t, a, "aggregator")
		if i%2 == 0 {
			if err := term.Resign(context.Background()); err != nil {
				t.Fatal(err)
			}
		} else {
			if _, err := cli.Delete(context.Background(), layout.LeaderKey(prefix(t), "aggregator")); err != nil {
				t.Fatal(err)
			}
			<-term.Context().Done()
		}
	}
}

func TestKeyDeletedUnderATermEndsIt(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	a := startSession(t, cli, "server-a")
	term := mustWin(t, a, "aggregator")
	if _, err := cli.Delete(context.Background(), layout.LeaderKey(prefix(t), "aggregator")); err != nil {
		t.Fatal(err)
	}
	if got := waitEnded(t, term); got != leadership.ReasonKeyLost {
		t.Fatalf("reason %q, want %q", got, leadership.ReasonKeyLost)
	}
	if term.Valid() {
		t.Fatal("term valid after its key was deleted")
	}
}

// Resign is guarded by the term's token: an old term resigning late (here after
// its key was removed and a successor won) leaves the successor's key alone.
func TestLateResignOfAnOldTermLeavesTheSuccessorInPlace(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	a := startSession(t, etcd.Client(t), "server-a")
	b := startSession(t, etcd.Client(t), "server-b")
	old := mustWin(t, a, "cert-renewer")
	next := campaign(context.Background(), b, "cert-renewer")
	if _, err := cli.Delete(context.Background(), layout.LeaderKey(prefix(t), "cert-renewer")); err != nil {
		t.Fatal(err)
	}
	successor := await(t, next, "server-b")
	if err := old.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	l, ok, err := etcdlease.NewCluster(cli, prefix(t)).Leader(context.Background(), "cert-renewer")
	if err != nil || !ok || l.Token != successor.Token() {
		t.Fatalf("after the old term resigned the leader is %+v (present %v, err %v); want token %d", l, ok, err, successor.Token())
	}
	if !successor.Valid() {
		t.Fatal("the successor's term ended")
	}
}

// A term that ended with its lease has nothing left to hand over: the session
// revokes the lease, and every key on it, once etcd answers. Resigning it does
// not wait on etcd (found by the chaos run: a scheduler stuck for seconds in
// such a Resign after a quorum loss could not campaign again, and the other
// instances' spread rule kept waiting for it), and the key still goes once
// etcd is reachable.
func TestResigningATermThatEndedWithItsLeaseWaitsOnNothing(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcd.Client(t)
	link := etcd.Proxy(t, 0)
	a := startSession(t, etcd.Client(t, link.Endpoint()), "server-a")
	term := mustWin(t, a, "cert-renewer")

	link.Blackhole()
	if got := waitEnded(t, term); got != leadership.ReasonExpired {
		t.Fatalf("term ended with %q, want %q", got, leadership.ReasonExpired)
	}
	// Ample for a round trip to a reachable etcd, and none gets through now.
	ctx, cancel := context.WithTimeout(context.Background(), testTTL)
	defer cancel()
	if err := term.Resign(ctx); err != nil {
		t.Fatalf("resigning a term whose lease expired, with etcd unreachable: %v", err)
	}
	if got := term.Reason(); got != leadership.ReasonExpired {
		t.Fatalf("after Resign the term's reason is %q; want it to stay %q", got, leadership.ReasonExpired)
	}

	link.Unblackhole()
	waitKeys(t, observer, "the expired term's leader key to go", func() bool {
		l, ok, err := etcdlease.NewCluster(observer, prefix(t)).Leader(context.Background(), "cert-renewer")
		return err == nil && (!ok || l.Token != term.Token())
	})
}

// Keep-alives run on the session's own goroutine: a job stuck in a call longer
// than the TTL (the seed's CA call) does not let its lease lapse.
func TestAJobBlockedLongerThanTheTTLDoesNotStopKeepAlives(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	a := startSession(t, etcd.Client(t), "server-a")
	term := mustWin(t, a, "cert-renewer")
	sent := a.Stats().KeepAlivesSent
	caCall := make(chan struct{})
	go func() { // the job, blocked in a slow call on the term's behalf
		time.Sleep(2 * testTTL)
		close(caCall)
	}()
	<-caCall
	if !term.Valid() {
		t.Fatalf("term ended while its job was blocked: %v", term.Err())
	}
	if got := a.Stats().KeepAlivesSent; got < sent+3 {
		t.Fatalf("only %d keep-alives sent during two TTLs", got-sent)
	}
}

func TestFreshTokenIsAboveEveryTermsToken(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	a := startSession(t, etcd.Client(t), "server-a")
	term := mustWin(t, a, "weekly-report")
	tok, err := etcdlease.NewCluster(cli, prefix(t)).FreshToken(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if tok <= term.Token() {
		t.Fatalf("fresh token %d not above the leader's %d", tok, term.Token())
	}
	if err := term.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if next := mustWin(t, a, "weekly-report"); next.Token() <= tok {
		t.Fatalf("a later term's token %d is not above the operator's %d", next.Token(), tok)
	}
}

// A resignation sent while etcd elects a new leader (its proposal lost with
// the old leader, or refused for want of one) is sent again until it lands:
// the key goes once there is a leader, not at etcd's request timeout, and the
// successor does not wait for the resigning instance's lease.
func TestResignDuringAnEtcdElectionDeletesTheKeyOnceThereIsALeader(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 3)
	lead := etcd.LeaderIndex(t)
	follower := (lead + 1) % 3
	observer := etcd.Client(t, etcd.Endpoint(follower))
	opts := []option{withTTL(10*time.Second, 3*time.Second), withRenew(time.Second)}
	a := startSession(t, etcd.Client(t, etcd.Endpoint(follower)), "server-a", opts...)
	term := mustWin(t, a, "weekly-report")

	etcd.Kill(t, lead)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := term.Resign(ctx); err != nil {
		t.Fatalf("resign during the election: %v", err)
	}
	if _, ok, err := etcdlease.NewCluster(observer, prefix(t)).Leader(ctx, "weekly-report"); err != nil || ok {
		t.Fatalf("after the resignation the leader key is still there (%v, %v)", ok, err)
	}
	if !leaseAlive(t, observer, hexLease(t, a.Stats().Lease)) {
		t.Fatal("the resigning instance's lease ended: the key went with it, not with the resignation")
	}
}
