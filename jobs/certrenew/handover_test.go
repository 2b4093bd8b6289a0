package certrenew_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// The leader is killed in the middle of an order (its term ends without
// handing over), before the CA took its challenge: the order stays pending.
// Its successor resumes that order — answers its challenge, finalizes it
// with the key recorded with it — at once (the lock-delay is an hour here:
// resuming orders nothing), and stores one current certificate. The CA sees
// one order.
func TestAPendingOrderOfAKilledLeaderIsCompletedByTheSuccessorWithoutOrderingAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{options: func(o *certrenew.Options) { o.LockDelay = time.Hour }})
	const d = "killed.customer.test"
	c.addDomains("active", d)
	c.killLeaderAt("a", 10, "challenge", d) // as the challenge is on its way: the CA never takes it
	if tok := c.int(`SELECT order_token FROM certrenew_domains WHERE domain = $1`, d); tok != 10 {
		t.Fatalf("order in flight recorded with token %d, want 10", tok)
	}
	inflightKey := c.inflightKey(d)

	c.lead("b", 20).mustPass()

	if n := len(c.ca.ordersFor(d)); n != 1 {
		t.Errorf("%d orders placed, want 1: the successor ordered again instead of resuming", n)
	}
	if n := len(c.ca.log("finalize")); n != 1 {
		t.Errorf("%d finalize requests, want 1", n)
	}
	c.assertRecovered(d, "b", 20)
	if r := c.str(`SELECT string_agg(result || ':' || token, ',' ORDER BY id) FROM certrenew_orders WHERE domain = $1`, d); r != "issued:10" {
		t.Errorf("order log %q, want issued:10 (the order token 10 placed, finished by its successor)", r)
	}
	if st := c.str(`SELECT state FROM certrenew_terms WHERE token = 10`); st != "running" {
		t.Errorf("dead term's row: %q, want running: the successor had no reason to wait out the lock-delay", st)
	}
	c.assertKeyOf(d, inflightKey)
}

// The leader is killed as its new order is on its way, before the CA made
// it: the successor knows of an order in flight but not where the CA has it
// (if anywhere). It waits the lock-delay after the dead term was last seen,
// orders again with the same key, and stores one current certificate.
func TestAnOrderThatNeverReachedTheCAIsOrderedAgainAfterTheLockDelay(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	const d = "killed.customer.test"
	c.addDomains("active", d)
	c.killLeaderAt("a", 10, "newOrder", d) // the CA never makes the order
	if st := c.str(`SELECT state FROM certrenew_terms WHERE token = 10`); st != "running" {
		t.Fatalf("killed term's row: %q, want running (it could not say goodbye)", st)
	}
	lastSeen := c.time(`SELECT seen_at FROM certrenew_terms WHERE token = 10`)
	inflightKey := c.inflightKey(d)

	before := len(c.ca.log("newOrder"))
	c.lead("b", 20).mustPass()

	orders := c.ca.log("newOrder")[before:]
	if len(orders) != 1 {
		t.Fatalf("successor placed %d orders, want 1", len(orders))
	}
	if earliest := lastSeen.Add(c.opts.LockDelay); orders[0].At.Before(earliest) {
		t.Errorf("successor ordered at %v, before the lock-delay after the dead term was last seen (%v)", orders[0].At, earliest)
	}
	if st := c.str(`SELECT state FROM certrenew_terms WHERE token = 10`); st != "lapsed" {
		t.Errorf("dead term's row after the successor waited: %q, want lapsed", st)
	}
	c.assertOneCurrentValidCertificate(d)
	if cur := c.current(d); cur.Token != 20 {
		t.Errorf("current certificate stored by token %d, want 20", cur.Token)
	}
	if r := c.str(`SELECT string_agg(result || ':' || token, ',' ORDER BY id) FROM certrenew_orders WHERE domain = $1`, d); r != "abandoned:10,issued:20" {
		t.Errorf("order log %q, want abandoned:10,issued:20", r)
	}
	c.assertKeyOf(d, inflightKey) // ordered again with the key the dead term stored with its order
}

// A term that ends while lego waits for the CA to issue (the order still
// "processing") stops its pass at once: lego's own wait would poll and sleep
// until order_timeout (an hour here) whatever the context says. The order is
// left in flight and the successor completes it.
func TestTermEndingWhileTheCAProcessesStopsThePassAtOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{options: func(o *certrenew.Options) { o.OrderTimeout = time.Hour }})
	const d = "processing.customer.test"
	c.addDomains("active", d)
	leader := c.lead("a", 10)
	var finalized atomic.Bool
	c.ca.setHook(func(ev *caEvent, w http.ResponseWriter, pebble func()) {
		switch {
		case ev.Kind == "finalize" && ev.Domains[0] == d:
			pebble()
			if rec := w.(*httptest.ResponseRecorder); rec.Code == http.StatusOK {
				// Issuing takes a while: lego must poll the order.
				var order map[string]any
				if err := json.Unmarshal(rec.Body.Bytes(), &order); err == nil {
					order["status"] = "processing"
					delete(order, "certificate")
					body, _ := json.Marshal(order)
					rec.Body.Reset()
					rec.Body.Write(body)
					rec.Header().Del("Content-Length")
					finalized.Store(true)
				}
			}
		case ev.Kind == "order" && finalized.Load():
			leader.kill() // as lego polls the order
			pebble()
		default:
			pebble()
		}
	})
	done := make(chan error, 1)
	go func() { done <- leader.pass() }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("pass of the ended term: %v, want context.Canceled", err)
		}
	case <-time.After(benchtest.Patience):
		t.Fatalf("the pass of a term that ended while lego polled a processing order did not return in %v", benchtest.Patience)
	}
	if !finalized.Load() {
		t.Fatal("the order was never finalized: the test did not reach lego's wait")
	}
	c.ca.setHook(nil)
	if tok := c.int(`SELECT order_token FROM certrenew_domains WHERE domain = $1`, d); tok != 10 {
		t.Fatalf("order in flight recorded with token %d, want 10", tok)
	}
	c.lead("b", 20).mustPass()
	c.assertOneCurrentValidCertificate(d)
	if cur := c.current(d); cur.Token != 20 {
		t.Errorf("current certificate stored by token %d, want 20", cur.Token)
	}
}

// killRenewalAfterIssuance issues a certificate for d, opens its ARI window,
// and kills the leader renewing it (token 20) once the CA has issued the
// renewal and marked the old certificate replaced, before it stores. It
// returns the old certificate.
func killRenewalAfterIssuance(t *testing.T, c *cluster, d string) *certrenew.Certificate {
	t.Helper()
	c.addDomains("active", d)
	c.lead("a", 10).mustPass()
	old := c.current(d)
	oldSerial := c.str(`SELECT serial FROM certrenew_certificates WHERE id = $1`, old.ID)
	now := time.Now()
	c.ca.setARIWindow(old.ChainPEM, now.Add(-2*time.Hour), now.Add(-time.Hour))

	renewer := c.lead("b", 20)
	c.ca.setHook(func(ev *caEvent, w http.ResponseWriter, pebble func()) {
		pebble()
		// A finalize Pebble refused (a bad nonce, sent again by lego) finalized nothing.
		if ev.Kind != "finalize" || ev.Replaces == "" || w.(*httptest.ResponseRecorder).Code >= 300 {
			return
		}
		// Wait until the CA has issued and marked the old certificate
		// replaced, then kill the renewing leader before it stores.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			o, err := c.ca.db.GetOrderByIssuedSerial(oldSerial)
			if err == nil {
				o.RLock()
				replaced := o.IsReplaced
				o.RUnlock()
				if replaced {
					break
				}
			}
		}
		renewer.kill()
	})
	if err := renewer.pass(); !errors.Is(err, context.Canceled) {
		t.Fatalf("killed renewer's pass: %v, want context.Canceled", err)
	}
	c.ca.setHook(nil)
	if cur := c.current(d); cur.ID != old.ID {
		t.Fatalf("the killed renewer stored its certificate")
	}
	return old
}

// A renewal is killed after the CA issued it (finalize answered, the old
// certificate marked replaced at the CA, the new one never stored). The
// successor asks the CA about the order the dead term noted, fetches the
// certificate it issued and stores it: no second order, and the renewal
// still counts as an ARI renewal.
func TestSuccessorOfAKilledRenewalStoresTheIssuedCertificateInsteadOfOrderingAgain(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	const d = "recovered.customer.test"
	old := killRenewalAfterIssuance(t, c, d)
	orders := len(c.ca.log("newOrder"))

	c.lead("c", 30).mustPass()

	if n := len(c.ca.log("newOrder")) - orders; n != 0 {
		t.Errorf("the successor placed %d orders, want none: the CA had issued the renewal", n)
	}
	cur := c.current(d)
	if cur.ID == old.ID || cur.Token != 30 {
		t.Fatalf("current certificate %d (token %d), want a new one stored by token 30", cur.ID, cur.Token)
	}
	var replacesSent *string
	var conflict bool
	if err := c.pool.QueryRow(context.Background(), `SELECT replaces_sent, ari_conflict FROM certrenew_certificates WHERE id = $1`, cur.ID).
		Scan(&replacesSent, &conflict); err != nil {
		t.Fatal(err)
	}
	if replacesSent == nil || *replacesSent == "" || conflict {
		t.Errorf("stored renewal: replaces_sent %v, ari_conflict %v; want it recorded as an ARI renewal", replacesSent, conflict)
	}
	if r := c.str(`SELECT result FROM certrenew_orders WHERE token = 20`); r != "issued" {
		t.Errorf("the dead term's order: result %q, want issued", r)
	}
	if got := c.inst["c"].counter("snip_certrenew_recovered_total"); got != 1 {
		t.Errorf("recovered metric: %v, want 1", got)
	}
	c.assertOneCurrentValidCertificate(d)
}

// Storing the certificate the CA issued to a dead term's order orders
// nothing, so the successor does it at once, without waiting for the
// lock-delay (an hour here) that holds back its own orders.
func TestTheSuccessorStoresAnIssuedCertificateWithoutWaitingForTheLockDelay(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{options: func(o *certrenew.Options) { o.LockDelay = time.Hour }})
	const d = "recovered-at-once.customer.test"
	killRenewalAfterIssuance(t, c, d)
	orders := len(c.ca.log("newOrder"))

	done := make(chan error, 1)
	go func() { done <- c.lead("c", 30).pass() }()
	benchtest.Eventually(t, "the successor stored the issued certificate", func() bool {
		return c.int(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1 AND current AND token = 30`, d) == 1
	})
	if err := <-done; err != nil {
		t.Fatalf("successor's pass: %v", err)
	}
	if n := len(c.ca.log("newOrder")) - orders; n != 0 {
		t.Errorf("the successor placed %d orders, want none", n)
	}
	if s := c.str(`SELECT state FROM certrenew_terms WHERE token = 20`); s != "running" {
		t.Errorf("the dead term is %q, want still running: its lock-delay has not passed", s)
	}
	c.assertRecovered(d, "c", 30)
}
