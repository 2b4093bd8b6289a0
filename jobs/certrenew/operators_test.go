package certrenew_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/acmeflow"
	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
)

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
