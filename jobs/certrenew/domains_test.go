package certrenew_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
)

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
