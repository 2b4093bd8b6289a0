package certrenew_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/letsencrypt/pebble/v2/ca"

	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/acmeflow"
	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
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
