package certrenew_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/testbench/acmetest"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// An earlier term paused (not dead) with its challenge on the way to the CA:
// the successor finds the order pending and finishes it at once (the
// lock-delay is an hour): it answers the challenge and finalizes. The paused
// leader's own challenge, arriving later, is refused by the CA (the challenge
// is no longer pending), and its pass ends without a write: one order, one
// finalize, one certificate.
func TestAPausedLeadersPendingOrderIsFinishedByTheSuccessorAndItsLateChallengeRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{
		ca:      caOptions{nonceReject: "0"},
		options: func(o *certrenew.Options) { o.LockDelay = time.Hour },
	})
	const d = "paused-pending.customer.test"
	c.addDomains("active", d)
	resume := c.pauseInPass("a", 10, "challenge")

	c.lead("b", 20).mustPass()
	if n := c.int(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1 AND token = 20`, d); n != 1 {
		t.Fatalf("the successor stored %d certificates, want 1", n)
	}

	err := resume() // the paused leader's challenge reaches the CA
	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) {
		t.Errorf("paused leader's pass: %v, want a stale-token refusal", err)
	}
	if n := len(c.ca.ordersFor(d)); n != 1 {
		t.Errorf("%d orders placed, want 1", n)
	}
	if n := len(c.ca.log("finalize")); n != 1 {
		t.Errorf("%d finalize requests, want 1", n)
	}
	late := c.ca.log("challenge")
	if last := late[len(late)-1]; last.Status != http.StatusBadRequest {
		t.Errorf("the paused leader's late challenge: %d %s, want 400 (no longer pending)", last.Status, last.Problem)
	}
	c.assertRecovered(d, "b", 20)
}

// An earlier term paused as the CA's answer to its new order was on its way
// back: the CA has the order, the successor does not know where. It waits the
// lock-delay; meanwhile the paused leader wakes, its transport notes the
// order's URL as the answer arrives, and its next request fails (its pass
// then ends, fenced). Looking again once the lock-delay has passed, the
// successor finds the order pending and finishes it instead of ordering a
// second time.
func TestAnOrderLearntOfDuringTheLockDelayIsFinishedNotOrderedAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{
		ca:      caOptions{nonceReject: "0"},
		options: func(o *certrenew.Options) { o.LockDelay = time.Second },
	})
	const d = "learnt-during-lock-delay.customer.test"
	c.addDomains("active", d)
	waiting := c.logged("waiting out the lock-delay before ordering")
	passed := c.logged("lock-delay passed; ordering")
	held, release := make(chan struct{}), make(chan struct{})
	var answered atomic.Bool
	nextSeen, seenOnce := make(chan struct{}), sync.Once{}
	c.ca.setHook(func(ev *caEvent, w http.ResponseWriter, pebble func()) {
		select {
		case <-passed: // the successor's requests, after its lock-delay
			pebble()
			return
		default:
		}
		switch {
		case ev.Kind == "newOrder": // the paused leader's: made at the CA, its answer held
			pebble()
			close(held)
			<-release
			answered.Store(true)
		case answered.Load(): // the paused leader's next requests, while the successor waits
			seenOnce.Do(func() { close(nextSeen) })
			problem(w, http.StatusInternalServerError, "urn:ietf:params:acme:error:serverInternal", "lost", "")
		default: // before the order: accounts, nonces
			pebble()
		}
	})
	pausedDone := make(chan error, 1)
	pausedOver := make(chan struct{})
	go func() { pausedDone <- c.lead("a", 10).pass(); close(pausedOver) }()
	<-held

	// The successor looks again only once the paused leader's pass is over
	// (its transport noted the URL before its next request failed): under
	// load the lock-delay alone could end first. And the paused leader's
	// heartbeat, which a real pause would stop too, may see the newer term
	// only after its transport had the answer (it would end the pass and
	// abandon the answer: the successor then orders again, as documented).
	c.holdAt("lock-delay passed; ordering", pausedOver)
	c.holdAt("a newer term has started: stopping this pass", nextSeen)
	done := make(chan error, 1)
	go func() { done <- c.lead("b", 20).pass() }()
	<-waiting // its first look found the order in flight, and no URL
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("successor's pass: %v", err)
	}
	var stale *fencing.StaleTokenError
	if err := <-pausedDone; !errors.As(err, &stale) {
		t.Errorf("paused leader's pass: %v, want a stale-token refusal", err)
	}
	if n := len(c.ca.ordersFor(d)); n != 1 {
		t.Errorf("%d orders placed, want 1: the successor ordered again instead of finishing the order it learnt of", n)
	}
	if s := c.str(`SELECT state FROM certrenew_terms WHERE token = 10`); s != "lapsed" {
		t.Errorf("the paused term is %q, want lapsed: the successor waited the lock-delay", s)
	}
	c.assertRecovered(d, "b", 20)
}

// An earlier term paused with its order validated but not finalized
// ("ready"), its finalize on the way to the CA: the successor finalizes that
// order itself, with the order's key, at once (the lock-delay is an hour
// here) and without ordering again. The CA finalizes an order only once, so
// the paused leader's own finalize, arriving later, is refused: one
// certificate, whichever way the two interleave.
func TestASuccessorFinishesAReadyOrderAtOnceAndThePausedLeadersFinalizeIsRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{
		ca:      caOptions{nonceReject: "0"}, // one finalize each, no retries
		options: func(o *certrenew.Options) { o.LockDelay = time.Hour },
	})
	const d = "ready.customer.test"
	c.addDomains("active", d)
	resume := c.pauseInPass("a", 10, "finalize")

	done := make(chan error, 1)
	go func() { done <- c.lead("b", 20).pass() }()
	benchtest.Eventually(t, "the successor stored a certificate (without waiting an hour)", func() bool {
		return c.int(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1 AND current AND token = 20`, d) == 1
	})
	if err := <-done; err != nil {
		t.Fatalf("successor's pass: %v", err)
	}
	if n := len(c.ca.log("newOrder")); n != 1 {
		t.Errorf("%d orders placed, want 1: the successor ordered again instead of finishing the ready order", n)
	}
	if s := c.str(`SELECT state FROM certrenew_terms WHERE token = 10`); s != "running" {
		t.Errorf("the paused term is %q, want still running: finishing its order waited for the lock-delay", s)
	}
	c.assertRecovered(d, "b", 20)

	if err := resume(); err == nil {
		t.Error("the paused leader's pass succeeded; want its finalize refused")
	}
	var accepted, refused int
	for _, e := range c.ca.log("finalize") {
		switch {
		case e.Status < 300:
			accepted++
		case e.Problem == "urn:ietf:params:acme:error:orderNotReady":
			refused++
		}
	}
	if accepted != 1 || refused != 1 {
		t.Errorf("finalize requests: %d accepted, %d refused as orderNotReady; want 1 and 1: %+v", accepted, refused, c.ca.log("finalize"))
	}
	if n := c.int(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1`, d); n != 1 {
		t.Errorf("%d certificates stored, want 1", n)
	}
	c.assertOneCurrentValidCertificate(d)
}

// The same, when the dead term could not even note its order's URL (no
// database at that moment): the successor's renewal is refused with 409
// alreadyReplaced, which lego answers by ordering again without "replaces":
// the renewer sees it, counts it and records it.
func TestSuccessorOfAKilledRenewalCountsTheSilentReorder(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	const d = "reorder.customer.test"
	killRenewalAfterIssuance(t, c, d)
	c.exec(`DELETE FROM certrenew_order_urls`)

	c.lead("c", 30).mustPass()

	var sawConflict bool
	for _, e := range c.ca.log("newOrder") {
		if e.Status == http.StatusConflict && e.Problem == "urn:ietf:params:acme:error:alreadyReplaced" {
			sawConflict = true
		}
	}
	if !sawConflict {
		t.Fatalf("the CA never answered 409 alreadyReplaced; the scenario did not happen")
	}
	last := c.ca.ordersFor(d)
	if r := last[len(last)-1].Replaces; r != "" {
		t.Errorf("last order replaces %q: want lego's silent re-order without it", r)
	}
	if got := c.inst["c"].counter("snip_certrenew_already_replaced_total"); got != 1 {
		t.Errorf("already_replaced metric: %v, want 1", got)
	}
	cur := c.current(d)
	var conflict bool
	if err := c.pool.QueryRow(context.Background(), `SELECT ari_conflict FROM certrenew_certificates WHERE id = $1`, cur.ID).Scan(&conflict); err != nil {
		t.Fatal(err)
	}
	if !conflict || cur.Token != 30 {
		t.Errorf("stored certificate: ari_conflict %v token %d, want true 30", conflict, cur.Token)
	}
	c.assertOneCurrentValidCertificate(d)
}

// A leader paused in the middle of an order (it still believes it leads)
// wakes after its successor has stored a certificate: its own store is
// refused by the fence. The lock-delay is off here, so only the fence
// stands between the two.
func TestPausedLeaderStoreIsRefusedByTheFence(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{options: func(o *certrenew.Options) { o.LockDelay = 0 }})
	const d = "paused.customer.test"
	c.addDomains("active", d)

	resume := c.pauseInPass("a", 10, "finalize")
	// The successor must not know the paused order (it would finish it, and
	// the CA would refuse the paused leader's finalize): it orders its own.
	c.exec(`DELETE FROM certrenew_order_urls`)

	c.lead("b", 20).mustPass()
	succ := c.current(d)
	err := resume()

	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 10 || stale.Current != 20 {
		t.Fatalf("paused leader's pass: %v, want a *fencing.StaleTokenError for token 10 against 20", err)
	}
	if n := len(c.ca.log("finalize")); n != 2 {
		t.Errorf("%d finalized orders, want 2 (the CA issued for both leaders)", n)
	}
	if cur := c.current(d); cur.ID != succ.ID || cur.Token != 20 {
		t.Errorf("current certificate %d (token %d), want the successor's %d (token 20)", cur.ID, cur.Token, succ.ID)
	}
	if n := c.int(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1`, d); n != 1 {
		t.Errorf("%d certificates stored, want 1", n)
	}
	c.assertOneCurrentValidCertificate(d)
}

// A leader paused after the CA issued its certificate (the order is valid,
// the download held) cannot store it any more once a successor has written:
// the certificate the CA issued is not lost. The URL the CA gave was noted
// before lego saw it; the successor fetches that certificate, checks it
// against the order's key, and stores it — without ordering again.
func TestACertificateIssuedToATermThatCannotStoreItIsStoredByTheNextWithoutOrderingAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{options: func(o *certrenew.Options) { o.LockDelay = 0 }})
	const d = "issued-then-paused.customer.test"
	c.addDomains("active", d)

	resume := c.pauseInPass("a", 10, "certificate")
	orderID := c.int(`SELECT id FROM certrenew_orders WHERE domain = $1`, d)
	if url := c.str(`SELECT cert_url FROM certrenew_order_urls WHERE order_id = $1 AND token = 10`, orderID); !strings.Contains(url, "/certZ/") {
		t.Fatalf("the issued certificate's URL was not noted before the download: %q", url)
	}

	c.lead("b", 20).mustPass()
	if n := len(c.ca.log("newOrder")); n != 1 {
		t.Errorf("%d orders placed, want 1: the successor ordered again instead of fetching the issued certificate", n)
	}
	if n := len(c.ca.log("finalize")); n != 1 {
		t.Errorf("%d orders finalized (certificates issued), want 1", n)
	}
	succ := c.current(d)
	if succ.Token != 20 {
		t.Errorf("current certificate stored by token %d, want the successor's 20", succ.Token)
	}
	if got := c.str(`SELECT result FROM certrenew_orders WHERE id = $1`, orderID); got != "issued" {
		t.Errorf("the first leader's order %d: result %q, want issued", orderID, got)
	}

	err := resume()
	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 10 || stale.Current != 20 {
		t.Fatalf("paused leader's pass: %v, want a *fencing.StaleTokenError for token 10 against 20", err)
	}
	if cur := c.current(d); cur.ID != succ.ID || cur.Serial != succ.Serial {
		t.Errorf("current certificate %d (serial %s), want the successor's %d (serial %s)", cur.ID, cur.Serial, succ.ID, succ.Serial)
	}
	if n := c.int(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1`, d); n != 1 {
		t.Errorf("%d certificates stored, want 1", n)
	}
	if n := c.int(`SELECT count(*) FROM certrenew_orders WHERE domain = $1`, d); n != 1 {
		t.Errorf("%d order rows, want 1", n)
	}
	c.assertOneCurrentValidCertificate(d)
}

// A certificate the CA issued is not lost when its download fails. The CA
// answers finalize with the order valid (it issued before answering, as
// Let's Encrypt usually does), then 500 to the download, which ends lego's
// call with an error. The renewer fetches the certificate again, in the same
// pass, instead of failing the order and ordering a second one later.
func TestAnIssuedCertificateWhoseDownloadFailedIsFetchedAgainNotOrderedAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	const d = "download-failed.customer.test"
	c.addDomains("active", d)
	var once sync.Once
	c.ca.setHook(func(ev *caEvent, w http.ResponseWriter, pebble func()) {
		refuse := false
		if ev.Kind == "certificate" {
			once.Do(func() { refuse = true })
		}
		if refuse {
			problem(w, http.StatusInternalServerError, "urn:ietf:params:acme:error:serverInternal", "certificate storage unavailable", "")
			return
		}
		pebble()
		if ev.Kind == "finalize" {
			acmetest.AnswerWhenIssued(c.ca.db, ev.OrderID, w.(*httptest.ResponseRecorder), 30*time.Second)
		}
	})

	c.lead("a", 10).mustPass()
	downloads := c.ca.log("certificate")
	if len(downloads) != 2 || downloads[0].Status != http.StatusInternalServerError || downloads[1].Status != http.StatusOK {
		t.Fatalf("certificate downloads %+v, want the refused one, then one more", downloads)
	}
	if n := len(c.ca.log("newOrder")); n != 1 {
		t.Errorf("%d orders placed, want 1: the renewer ordered again instead of fetching the issued certificate", n)
	}
	if r := c.str(`SELECT result FROM certrenew_orders WHERE domain = $1`, d); r != "issued" {
		t.Errorf("the order: result %q, want issued", r)
	}
	if f := c.int(`SELECT failures FROM certrenew_domains WHERE domain = $1`, d); f != 0 {
		t.Errorf("the domain has %d failures, want 0", f)
	}
	c.assertRecovered(d, "a", 10)
}
