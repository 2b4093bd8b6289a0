package certrenew_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/letsencrypt/pebble/v2/ca"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/acmeflow"
	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/testbench/acmetest"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// A new leader issues a certificate for every wanted domain; the CA's
// validation reaches other instances than the one ordering, which answer
// from the shared table; the account is registered once and reused by the
// next leader.
func TestFirstIssuanceAnsweredByOtherInstances(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	domains := []string{"shop.customer-one.test", "www.customer-two.test", "links.customer-three.test"}
	c.addDomains("active", domains...)
	c.addDomains("pending", "not-yet.customer-four.test")
	c.ca.front.route(c.inst["b"].addr, c.inst["c"].addr) // the CA never reaches a

	c.lead("a", 10).mustPass()

	c.assertOneCurrentValidCertificate(domains...)
	if n := c.int(`SELECT count(*) FROM certrenew_certificates WHERE domain = 'not-yet.customer-four.test'`); n != 0 {
		t.Errorf("a domain whose status is not wanted got %d certificates", n)
	}
	if hits := c.inst["a"].hits.Load(); hits != 0 {
		t.Errorf("instance a (the one ordering) answered %d challenges; the CA cannot reach it", hits)
	}
	if hits := c.inst["b"].hits.Load() + c.inst["c"].hits.Load(); hits < int64(len(domains)) {
		t.Errorf("instances b and c answered %d challenges, want at least one per domain (%d)", hits, len(domains))
	}
	for _, d := range domains {
		if tok := c.int(`SELECT token FROM certrenew_certificates WHERE domain = $1 AND current`, d); tok != 10 {
			t.Errorf("%s: stored with token %d, want 10", d, tok)
		}
		if st := c.str(`SELECT result FROM certrenew_orders WHERE domain = $1`, d); st != "issued" {
			t.Errorf("%s: order result %q, want issued", d, st)
		}
	}
	if n := c.int(`SELECT count(*) FROM certrenew_challenges`); n != 0 {
		t.Errorf("%d challenge tokens left behind", n)
	}
	if st := c.str(`SELECT state FROM certrenew_terms WHERE token = 10`); st != "idle" {
		t.Errorf("term 10 after a full pass: %q, want idle", st)
	}

	// The next leader reuses the account; nothing is due, nothing is ordered.
	orders := len(c.ca.log("newOrder"))
	c.lead("b", 20).mustPass()
	if n := len(c.ca.log("newOrder")); n != orders {
		t.Errorf("the next leader ordered %d certificates for domains that have one", n-orders)
	}
	if n := c.ca.accountsCreated(); n != 1 {
		t.Errorf("%d accounts created at the CA, want 1 for all instances", n)
	}
	if n := c.int(`SELECT count(*) FROM certrenew_account WHERE account_url IS NOT NULL`); n != 1 {
		t.Errorf("%d registered accounts stored, want 1", n)
	}
	if got := c.inst["a"].counter("snip_certrenew_orders_total", "result", "issued"); got != float64(len(domains)) {
		t.Errorf("orders issued metric on a: %v, want %d", got, len(domains))
	}
	if got := c.inst["b"].counter("snip_certrenew_certificates", "state", domainstore.StateValid); got != float64(len(domains)) {
		t.Errorf("certificates{state=valid} on b: %v, want %d", got, len(domains))
	}
	if days := c.inst["b"].counter("snip_certrenew_soonest_expiry_days"); days < 80 || days > 90 {
		t.Errorf("soonest expiry: %v days, want about 90 (Pebble's default validity)", days)
	}
}

// When the CA's renewal window (ARI) opens, the leader renews, sending
// "replaces" with the certificate's ARI CertID, and the CA does not answer
// 409: an ARI renewal, exempt from rate limits.
func TestRenewalInsideTheARIWindowSendsReplaces(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	const d = "renew.customer.test"
	c.addDomains("active", d)
	c.lead("a", 10).mustPass()
	old := c.current(d)
	oldCertID := c.str(`SELECT ari_cert_id FROM certrenew_certificates WHERE id = $1`, old.ID)

	// The CA moves the window to the past (as for a mass revocation).
	now := time.Now()
	c.ca.setARIWindow(old.ChainPEM, now.Add(-2*time.Hour), now.Add(-time.Hour))

	c.lead("b", 20).mustPass()

	cur := c.current(d)
	if cur.ID == old.ID {
		t.Fatalf("not renewed inside the ARI window")
	}
	orders := c.ca.ordersFor(d)
	if len(orders) != 2 {
		t.Fatalf("%d orders for %s, want 2 (issue, renew)", len(orders), d)
	}
	if orders[1].Replaces != oldCertID {
		t.Errorf("renewal order replaces %q, want the old certificate's ARI CertID %q", orders[1].Replaces, oldCertID)
	}
	for _, e := range c.ca.log("") {
		if e.Status == http.StatusConflict {
			t.Errorf("the CA answered 409 (%s) to %s", e.Problem, e.Kind)
		}
	}
	if got := c.inst["b"].counter("snip_certrenew_already_replaced_total"); got != 0 {
		t.Errorf("already_replaced metric: %v, want 0", got)
	}
	var replacesID int64
	var conflict bool
	if err := c.pool.QueryRow(context.Background(), `SELECT replaces_id, ari_conflict FROM certrenew_certificates WHERE id = $1`, cur.ID).
		Scan(&replacesID, &conflict); err != nil {
		t.Fatal(err)
	}
	if replacesID != old.ID || conflict {
		t.Errorf("new certificate: replaces_id %d ari_conflict %v, want %d false", replacesID, conflict, old.ID)
	}
	if len(c.ca.log("renewalInfo")) == 0 {
		t.Errorf("the renewal window was never asked for")
	}
	c.assertOneCurrentValidCertificate(d)
}

// With a short-lived profile, certificates are renewed in real time inside
// the CA's window, each renewal naming its predecessor and happening before
// the predecessor expires.
func TestShortLivedCertificatesRenewInRealTime(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{
		ca:      caOptions{profiles: map[string]ca.Profile{"shortlived": {Description: "12 s", ValidityPeriod: 12}}},
		options: func(o *certrenew.Options) { o.Profile = "shortlived" },
	})
	const d = "short.customer.test"
	c.addDomains("active", d)
	leader := c.lead("a", 10)

	eventually(t, "two renewals", leader.mustPass, func() bool {
		return c.int(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1`, d) >= 3
	})
	// Each certificate's row keeps the renewal instant finally chosen for it
	// (moved into the CA's window once the window was learnt, possibly in the
	// very pass that then renewed it).
	type gen struct {
		id                int64
		renewAt, notAfter time.Time
		certID            string
	}
	rows, err := c.pool.Query(context.Background(), `SELECT id, renew_at, not_after, ari_cert_id
		FROM certrenew_certificates WHERE domain = $1 ORDER BY id`, d)
	if err != nil {
		t.Fatal(err)
	}
	gens, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (gen, error) {
		var g gen
		return g, r.Scan(&g.id, &g.renewAt, &g.notAfter, &g.certID)
	})
	if err != nil {
		t.Fatal(err)
	}

	orders := c.ca.ordersFor(d)
	if len(orders) != len(gens) {
		t.Fatalf("%d orders for %d certificates", len(orders), len(gens))
	}
	for i := 1; i < len(gens); i++ {
		prev := gens[i-1]
		if orders[i].Replaces != prev.certID {
			t.Errorf("renewal %d replaces %q, want %q", i, orders[i].Replaces, prev.certID)
		}
		if orders[i].At.Before(prev.renewAt) {
			t.Errorf("renewal %d ordered at %v, before the chosen instant %v", i, orders[i].At, prev.renewAt)
		}
		if !orders[i].At.Before(prev.notAfter) {
			t.Errorf("renewal %d ordered at %v, after its predecessor expired at %v", i, orders[i].At, prev.notAfter)
		}
	}
	for _, e := range c.ca.log("newOrder") {
		if e.Status == http.StatusConflict {
			t.Errorf("the CA answered 409 to an order")
		}
	}
	c.assertOneCurrentValidCertificate(d)
}

// A rate limit's Retry-After is honoured: no order for the domain until it
// has passed; the other domains are issued meanwhile.
func TestRateLimitRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	const limited, other = "limited.customer.test", "other.customer.test"
	c.addDomains("active", limited, other)
	var refused time.Time
	var once sync.Once
	c.ca.setHook(func(ev *caEvent, w http.ResponseWriter, pebble func()) {
		hit := false
		if ev.Kind == "newOrder" && len(ev.Domains) == 1 && ev.Domains[0] == limited {
			once.Do(func() {
				refused, hit = time.Now(), true
				problem(w, http.StatusTooManyRequests, "urn:ietf:params:acme:error:rateLimited",
					`too many certificates (50) already issued for "customer.test" in the last 168h0m0s`, "2")
			})
		}
		if !hit {
			pebble()
		}
	})

	leader := c.lead("a", 10)
	leader.mustPass()
	c.assertOneCurrentValidCertificate(other)
	if r := c.str(`SELECT last_error_reason FROM certrenew_domains WHERE domain = $1`, limited); r != acmeflow.ReasonRateLimited {
		t.Errorf("%s: last error reason %q, want %q", limited, r, acmeflow.ReasonRateLimited)
	}
	if f := c.int(`SELECT failures FROM certrenew_domains WHERE domain = $1`, limited); f != 0 {
		t.Errorf("a rate limit counted as %d failures toward the backoff, want 0", f)
	}

	eventually(t, "the limited domain issued", leader.mustPass, func() bool {
		return c.int(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1`, limited) == 1
	})
	orders := c.ca.ordersFor(limited)
	if len(orders) != 2 {
		t.Fatalf("%d orders for %s, want 2 (refused, then issued)", len(orders), limited)
	}
	if wait := orders[1].At.Sub(refused); wait < 2*time.Second {
		t.Errorf("ordered again %v after the 429, before its Retry-After (2s)", wait)
	}
	if got := c.inst["a"].counter("snip_certrenew_rate_limit_waits_total"); got != 1 {
		t.Errorf("rate-limit waits: %v, want 1", got)
	}
	c.assertOneCurrentValidCertificate(limited, other)
}

// A 503 pauses the whole renewer, not just the domain: no order is asked
// for until the pause ends, by this leader or the next.
func TestUnavailableCAPausesTheWholeRenewer(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{options: func(o *certrenew.Options) { o.Concurrency = 1 }})
	domains := []string{"one.customer.test", "two.customer.test", "three.customer.test"}
	c.addDomains("active", domains...)
	var refused time.Time
	var once sync.Once
	c.ca.setHook(func(ev *caEvent, w http.ResponseWriter, pebble func()) {
		hit := false
		if ev.Kind == "newOrder" {
			once.Do(func() {
				refused, hit = time.Now(), true
				problem(w, http.StatusServiceUnavailable, "urn:ietf:params:acme:error:serverInternal", "down for maintenance", "2")
			})
		}
		if !hit {
			pebble()
		}
	})

	c.lead("a", 10).mustPass()
	if n := len(c.ca.log("newOrder")); n != 1 {
		t.Errorf("%d orders in the pass of the 503, want 1 (the refused one): the renewer did not pause", n)
	}
	if n := c.int(`SELECT count(*) FROM certrenew_job WHERE paused_until > now()`); n != 1 {
		t.Errorf("the pause is not recorded for the next leader")
	}
	next := c.lead("b", 20)
	eventually(t, "all issued after the pause", next.mustPass, func() bool {
		return c.int(`SELECT count(*) FROM certrenew_certificates WHERE current`) == int64(len(domains))
	})
	for _, e := range c.ca.log("newOrder")[1:] {
		if e.At.Sub(refused) < 2*time.Second {
			t.Errorf("order for %v %v after the 503, before its Retry-After (2s)", e.Domains, e.At.Sub(refused))
		}
	}
	c.assertOneCurrentValidCertificate(domains...)
}

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

// Invalid names are recorded with a reason and never ordered, while the
// valid ones (an internationalised one among them) are issued in the same
// pass.
func TestInvalidDomainsAreReportedWhileValidOnesAreIssued(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	valid := map[string]string{
		"good.customer.test":   "good.customer.test",
		"Bücher.customer.test": "xn--bcher-kva.customer.test",
		"UPPER.Customer.TEST":  "upper.customer.test",
	}
	invalid := map[string]string{
		"has space.customer.test":    domainstore.InvalidWhitespace,
		"192.0.2.7":                  domainstore.InvalidIPAddress,
		"[2001:db8::1]":              domainstore.InvalidIPAddress,
		"trailing.customer.test.":    domainstore.InvalidTrailingDot,
		"*.wild.customer.test":       domainstore.InvalidWildcard,
		"☃.customer.test":            domainstore.InvalidIDN,
		"localhost":                  domainstore.InvalidSingleLabel,
		longLabel + ".customer.test": domainstore.InvalidLabelTooLong,
		longName:                     domainstore.InvalidTooLong,
	}
	for raw := range valid {
		c.addDomains("active", raw)
	}
	for raw := range invalid {
		c.addDomains("active", raw)
	}

	c.lead("a", 10).mustPass()

	var names []string
	for _, n := range valid {
		names = append(names, n)
	}
	c.assertOneCurrentValidCertificate(names...)
	for raw, code := range invalid {
		if got := c.str(`SELECT coalesce((SELECT code FROM certrenew_invalid_domains WHERE domain = $1), 'not recorded')`, raw); got != code {
			t.Errorf("%.40q: recorded as %q, want %q", raw, got, code)
		}
	}
	if n := len(c.ca.log("newOrder")); n != len(valid) {
		t.Errorf("%d orders, want one per valid domain (%d)", n, len(valid))
	}
	if got := c.inst["a"].counter("snip_certrenew_certificates", "state", domainstore.StateInvalid); got != float64(len(invalid)) {
		t.Errorf("certificates{state=invalid}: %v, want %d", got, len(invalid))
	}

	// Fixed by the customer: the record goes, the certificate comes.
	c.exec(`UPDATE custom_domains SET domain = 'spaceless.customer.test' WHERE domain = 'has space.customer.test'`)
	c.lead("b", 20).mustPass()
	if n := c.int(`SELECT count(*) FROM certrenew_invalid_domains WHERE domain = 'has space.customer.test'`); n != 0 {
		t.Errorf("the fixed domain is still recorded invalid")
	}
	c.assertOneCurrentValidCertificate("spaceless.customer.test")
}

// With require_public_tld (the default, for a public CA), names a public CA
// refuses by policy are recorded invalid instead of ordered and backed off
// forever: a top-level domain that is not public, a registry's suffix, more
// labels than Let's Encrypt allows. A name under a public TLD is issued.
func TestNamesAPublicCARefusesArePolicyInvalidWhenRequired(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{options: func(o *certrenew.Options) { o.RequirePublicTLD = true }})
	invalid := map[string]string{
		"shop.customer.test":            domainstore.InvalidNotPublic,
		"printer.local":                 domainstore.InvalidNotPublic,
		"links.shop.comm":               domainstore.InvalidNotPublic, // a typo of .com
		"co.uk":                         domainstore.InvalidPublicSuffix,
		"a.b.c.d.e.f.g.h.i.example.com": domainstore.InvalidTooManyLabels,
	}
	for raw := range invalid {
		c.addDomains("active", raw)
	}
	c.addDomains("active", "links.shop.example.co.uk", "go.bücher.example.com")

	c.lead("a", 10).mustPass()

	c.assertOneCurrentValidCertificate("links.shop.example.co.uk", "go.xn--bcher-kva.example.com")
	for raw, code := range invalid {
		if got := c.str(`SELECT coalesce((SELECT code FROM certrenew_invalid_domains WHERE domain = $1), 'not recorded')`, raw); got != code {
			t.Errorf("%q: recorded as %q, want %q", raw, got, code)
		}
	}
	if n := len(c.ca.log("newOrder")); n != 2 {
		t.Errorf("%d orders, want 2 (one per name under a public TLD)", n)
	}
}

func readKey(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(strings.Split(string(b), "\n")[0])
}

const longLabel = "this-label-is-sixty-four-characters-long-which-is-one-too-many-x"

var longName = func() string {
	s := "a"
	for len(s) < 250 {
		s += ".abcdefghij"
	}
	return s + ".test"
}()

// The order budget counts orders of every term in PostgreSQL: a new leader
// does not get a fresh budget.
func TestOrderBudgetHoldsAcrossLeaders(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{options: func(o *certrenew.Options) { o.OrderBudget = 2; o.Concurrency = 1 }})
	domains := []string{"b1.customer.test", "b2.customer.test", "b3.customer.test"}
	c.addDomains("active", domains...)

	c.lead("a", 10).mustPass()
	c.lead("b", 20).mustPass()

	if n := len(c.ca.log("newOrder")); n != 2 {
		t.Errorf("%d orders with a budget of 2", n)
	}
	if n := c.int(`SELECT count(*) FROM certrenew_certificates WHERE current`); n != 2 {
		t.Errorf("%d certificates, want 2", n)
	}
	if got := c.inst["b"].counter("snip_certrenew_order_budget_remaining"); got != 0 {
		t.Errorf("budget remaining: %v, want 0", got)
	}
	if got := c.inst["b"].counter("snip_certrenew_certificates", "state", domainstore.StatePending); got != 1 {
		t.Errorf("certificates{state=pending}: %v, want 1", got)
	}
}

// A term that hands over (the scheduler stops the job while the term is
// still good: resign, shutdown) leaves no lock-delay behind.
func TestHandedOverTermLeavesNoLockDelay(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{options: func(o *certrenew.Options) { o.LockDelay = time.Hour }})
	const d = "handover.customer.test"
	c.addDomains("active", d)
	leader := c.lead("a", 10)
	c.ca.setHook(func(ev *caEvent, _ http.ResponseWriter, pebble func()) {
		if ev.Kind == "challenge" {
			leader.stop() // the scheduler stops the job; the term is still valid
		}
		pebble()
	})
	if err := leader.pass(); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped leader's pass: %v, want context.Canceled", err)
	}
	c.ca.setHook(nil)
	if st := c.str(`SELECT state FROM certrenew_terms WHERE token = 10`); st != "idle" {
		t.Fatalf("handed-over term's row: %q, want idle", st)
	}
	// With an hour of lock-delay, only its absence lets this pass order.
	c.lead("b", 20).mustPass()
	c.assertOneCurrentValidCertificate(d)
}

// Rotation: with the new key first and the old one second, a pass re-seals
// every stored key; then the old key can go.
func TestKeyRotationReseals(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	const d = "rotate.customer.test"
	c.addDomains("active", d)
	c.lead("a", 10).mustPass()
	oldLine := readKey(t, c.keyFile)
	newLine := newKey(t)

	rotated := c.opts
	rotated.KeyFile = writeKeyFile(t, newLine, oldLine)
	in := c.inst["b"]
	in.job = c.build("b", in.reg, rotated)
	c.lead("b", 20).mustPass()

	if got := in.counter("snip_certrenew_sealed_with_old_keys"); got != 0 {
		t.Errorf("sealed with old keys after the pass: %v, want 0", got)
	}
	onlyNew := c.keyring(writeKeyFile(t, newLine))
	if _, err := certrenew.Current(context.Background(), c.pool, onlyNew, d); err != nil {
		t.Errorf("after rotation the new key alone does not open the certificate key: %v", err)
	}
	if _, err := certrenew.Current(context.Background(), c.pool, c.keys, d); !errors.Is(err, keyring.ErrUnknownKey) {
		t.Errorf("after rotation the old key alone: %v, want ErrUnknownKey", err)
	}
	// The account key was re-sealed too: a leader with only the new key works.
	final := c.opts
	final.KeyFile = writeKeyFile(t, newLine)
	in = c.inst["c"]
	in.job = c.build("c", in.reg, final)
	c.exec(`DELETE FROM certrenew_certificates`)
	c.lead("c", 30).mustPass()
	c.keys = onlyNew
	c.assertOneCurrentValidCertificate(d)
}

// A domain whose orders fail backs off (1 m, then 10 m, ...) without
// holding back the others.
func TestFailingDomainBacksOffWithoutStoppingOthers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	const blocked, fine = "blocked.customer.test", "fine.customer.test"
	c.addDomains("active", blocked, fine)
	if err := c.ca.db.AddBlockedDomain(blocked); err != nil { // the CA's policy refuses it
		t.Fatal(err)
	}
	leader := c.lead("a", 10)
	leader.mustPass()
	c.assertOneCurrentValidCertificate(fine)

	backoff := func() (failures int64, wait time.Duration, reason string) {
		var secs float64
		if err := c.pool.QueryRow(context.Background(), `SELECT failures,
				extract(epoch FROM next_attempt_at - last_error_at)::float8, last_error_reason
			FROM certrenew_domains WHERE domain = $1`, blocked).Scan(&failures, &secs, &reason); err != nil {
			t.Fatal(err)
		}
		return failures, time.Duration(secs * float64(time.Second)).Round(time.Second), reason
	}
	if f, w, r := backoff(); f != 1 || w != time.Minute || r != acmeflow.ReasonRejected {
		t.Errorf("after the first failure: failures %d, next attempt after %v, reason %q; want 1, 1m0s, %q", f, w, r, acmeflow.ReasonRejected)
	}
	leader.mustPass()
	if n := len(c.ca.ordersFor(blocked)); n != 1 {
		t.Errorf("ordered %d times during the backoff, want once", n)
	}
	// The minute passes (for this domain).
	c.exec(`UPDATE certrenew_domains SET next_attempt_at = now() WHERE domain = $1`, blocked)
	leader.mustPass()
	if f, w, _ := backoff(); f != 2 || w != 10*time.Minute {
		t.Errorf("after the second failure: failures %d, next attempt after %v; want 2, 10m0s", f, w)
	}
	if got := c.inst["a"].counter("snip_certrenew_failures_total", "reason", acmeflow.ReasonRejected); got != 2 {
		t.Errorf("failures{reason=%s}: %v, want 2", acmeflow.ReasonRejected, got)
	}
	if got := c.inst["a"].counter("snip_certrenew_certificates", "state", domainstore.StateFailing); got != 1 {
		t.Errorf("certificates{state=failing}: %v, want 1", got)
	}
}

// An operator's retry request (certs retry) makes the next pass order for a
// backing-off domain at once; the leader, not the operator, clears the
// back-off, fenced, and the failure count goes on. Asking for a domain that
// is not backing off, or for an invalid name, records nothing. List shows
// each domain's state as the renewer sees it.
func TestAnOperatorsRetryRequestEndsTheBackOffAtTheNextPass(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	const blocked, fine = "blocked.customer.test", "fine.customer.test"
	c.addDomains("active", blocked, fine, "bad name.customer.test")
	if err := c.ca.db.AddBlockedDomain(blocked); err != nil { // the CA's policy refuses it
		t.Fatal(err)
	}
	leader := c.lead("a", 10)
	leader.mustPass()
	ctx := context.Background()

	list, err := certrenew.List(ctx, c.svc, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, s := range list {
		states[s.Domain] = s.State + "/" + s.ErrorReason
	}
	want := map[string]string{
		"bad name.customer.test": domainstore.StateInvalid + "/" + domainstore.InvalidWhitespace,
		blocked:                  domainstore.StateFailing + "/" + acmeflow.ReasonRejected,
		fine:                     domainstore.StateValid + "/",
	}
	if !maps.Equal(states, want) {
		t.Errorf("List: %v, want %v", states, want)
	}

	if _, err := certrenew.RequestRetry(ctx, c.svc, c.opts, fine, "ops@test"); !errors.Is(err, certrenew.ErrNotBackingOff) {
		t.Errorf("retry of a domain with a valid certificate: %v, want ErrNotBackingOff", err)
	}
	var ie *domainstore.InvalidNameError
	if _, err := certrenew.RequestRetry(ctx, c.svc, c.opts, "bad name.customer.test", "ops@test"); !errors.As(err, &ie) {
		t.Errorf("retry of an invalid name: %v, want an InvalidNameError", err)
	}
	if n := c.int(`SELECT count(*) FROM certrenew_retry_requests`); n != 0 {
		t.Fatalf("%d requests recorded for names that cannot be retried", n)
	}

	leader.mustPass() // inside the back-off: no order
	if n := len(c.ca.ordersFor(blocked)); n != 1 {
		t.Fatalf("%d orders during the back-off, want 1", n)
	}
	r, err := certrenew.RequestRetry(ctx, c.svc, c.opts, "BLOCKED.customer.test", "ops@test")
	if err != nil || r.Name != blocked || r.Failures != 1 || r.ErrorReason != acmeflow.ReasonRejected {
		t.Fatalf("RequestRetry: %+v, %v", r, err)
	}
	if n := c.int(`SELECT count(*) FROM certrenew_domains WHERE domain = $1 AND next_attempt_at > now()`, blocked); n != 1 {
		t.Error("the request changed the renewer's state itself; only the leader may")
	}
	leader.mustPass()
	if n := len(c.ca.ordersFor(blocked)); n != 2 {
		t.Errorf("%d orders after the retry request, want 2", n)
	}
	if n := c.int(`SELECT count(*) FROM certrenew_retry_requests`); n != 0 {
		t.Errorf("the request is still there after the pass that handled it")
	}
	if n := c.int(`SELECT failures FROM certrenew_domains WHERE domain = $1 AND token = 10`, blocked); n != 2 {
		t.Errorf("failures after the retried order failed again: %d, want 2 (written by the leader)", n)
	}

	// A request for a name that is no longer wanted (written before the
	// domain went) is dropped by the next pass, changing nothing else.
	c.exec(`INSERT INTO certrenew_retry_requests (domain, requested_by) VALUES ('gone.customer.test', 'ops@test')`)
	leader.mustPass()
	if n := c.int(`SELECT count(*) FROM certrenew_retry_requests`); n != 0 {
		t.Errorf("a request for a name that is not wanted was left in place")
	}
	if n := len(c.ca.ordersFor("gone.customer.test")); n != 0 {
		t.Errorf("%d orders for a name that is not wanted", n)
	}
}

// An operator's renewal request (certs renew) renews a valid certificate at
// the leader's next pass, as an ARI renewal of it; nothing before that pass,
// and a name without a certificate is refused without a request.
func TestAnOperatorsRenewalRequestRenewsAValidCertificateAtTheNextPass(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{})
	const d = "renew.customer.test"
	c.addDomains("active", d)
	leader := c.lead("a", 10)
	leader.mustPass()
	first := c.current(d)
	ctx := context.Background()

	if _, err := certrenew.RequestRenewal(ctx, c.pool, c.opts, "none.customer.test", "ops@test"); !errors.Is(err, certrenew.ErrNoCertificateToRenew) {
		t.Errorf("renewal of a name without a certificate: %v, want ErrNoCertificateToRenew", err)
	}
	r, err := certrenew.RequestRenewal(ctx, c.pool, c.opts, "RENEW.customer.test", "ops@test")
	if err != nil || r.Name != d || r.Serial != first.Serial {
		t.Fatalf("RequestRenewal: %+v, %v", r, err)
	}
	if c.current(d).ID != first.ID {
		t.Fatal("the request renewed by itself; only the leader may")
	}
	leader.mustPass()
	second := c.current(d)
	if second.ID == first.ID || second.Serial == first.Serial {
		t.Fatalf("no new certificate after the pass that read the renewal request")
	}
	orders := c.ca.ordersFor(d)
	if len(orders) != 2 || orders[1].Replaces == "" {
		t.Errorf("orders %+v: want the first and one renewal that replaces it", orders)
	}
	if n := c.int(`SELECT count(*) FROM certrenew_retry_requests`); n != 0 {
		t.Errorf("the request is still there after the pass that handled it")
	}
	leader.mustPass()
	if n := len(c.ca.ordersFor(d)); n != 2 {
		t.Errorf("%d orders after one more pass, want 2: the renewed certificate is not due", n)
	}
	c.assertOneCurrentValidCertificate(d)
}

// No more than concurrency orders are in flight at once, and that many are.
func TestConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	c := newCluster(t, clusterOptions{options: func(o *certrenew.Options) { o.Concurrency = 2 }})
	var domains []string
	for i := range 8 {
		domains = append(domains, "par"+string(rune('a'+i))+".customer.test")
	}
	c.addDomains("active", domains...)
	var mu sync.Mutex
	inFlight, most := 0, 0
	// Counted on Pebble's answer, which the client gets only after the hook
	// returns: a request Pebble refused (a bad nonce, 5 % of them on purpose,
	// which lego sends again) neither starts nor ends an order.
	c.ca.setHook(func(ev *caEvent, w http.ResponseWriter, pebble func()) {
		pebble()
		if code := w.(*httptest.ResponseRecorder).Code; code >= 300 {
			return
		}
		switch ev.Kind {
		case "newOrder":
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // give the others a chance to overlap
		case "finalize":
			mu.Lock()
			inFlight--
			mu.Unlock()
		}
	})
	c.lead("a", 10).mustPass()
	c.assertOneCurrentValidCertificate(domains...)
	if most != 2 {
		t.Errorf("at most %d orders in flight at once, want exactly 2 (the concurrency)", most)
	}
}
