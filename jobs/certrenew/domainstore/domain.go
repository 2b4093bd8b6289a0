package domainstore

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"sync"
	"time"
)

// Domain is one certificate name and what PostgreSQL holds about it. Only
// the Store changes it, and only once its write has committed.
type Domain struct {
	Name    string // ASCII: what the certificate is for
	source  string // the custom_domains row it came from
	addedAt time.Time

	// certrenew_domains
	OrderID      *int64 // the order in flight, if any
	orderToken   *int64
	orderStarted *time.Time
	orderKey     []byte // sealed
	attempt      int
	Failures     int        // failed orders in a row
	NextAttempt  *time.Time // backing off until then
	lastError    *string

	Cert *Cert // the current certificate, nil if none
}

// Cert is a domain's current certificate.
type Cert struct {
	id           int64
	Leaf         *x509.Certificate
	NotBefore    time.Time
	NotAfter     time.Time
	RenewAt      time.Time
	ARIStart     *time.Time // the CA's renewal window; nil: none
	ARIEnd       *time.Time
	ARINextCheck time.Time // when to ask the CA for the window again
	ARICertID    string    // its RFC 9773 identifier
	token        int64
}

// Invalid is a wanted name that cannot get a certificate.
type Invalid struct {
	domain string
	err    *InvalidNameError
}

// Certificate states (the certificates metric's state label).
const (
	StateValid   = "valid"   // current certificate, not yet due
	StateDue     = "due"     // current certificate past its renewal instant, not yet replaced
	StateExpired = "expired" // current certificate past its not-after
	StatePending = "pending" // no certificate yet
	StateFailing = "failing" // no certificate yet, and the last order failed
	StateInvalid = "invalid" // the domain cannot get one (certrenew_invalid_domains)
)

// State is the domain's certificate state at now (the metric's label).
func (d *Domain) State(now time.Time) string {
	if d.Cert == nil {
		return StateAt(now, d.Failures, nil, nil)
	}
	return StateAt(now, d.Failures, &d.Cert.NotAfter, &d.Cert.RenewAt)
}

// StateAt is the state of a valid name at now, given its failures and its
// current certificate's not-after and renewal instant (nil: no certificate).
func StateAt(now time.Time, failures int, notAfter, renewAt *time.Time) string {
	switch {
	case notAfter == nil && failures > 0:
		return StateFailing
	case notAfter == nil:
		return StatePending
	case !now.Before(*notAfter):
		return StateExpired
	case !now.Before(*renewAt):
		return StateDue
	}
	return StateValid
}

// Replaces is the ARI identifier of the certificate an order for d
// replaces; "" when d has none.
func (d *Domain) Replaces() string {
	if d.Cert == nil {
		return ""
	}
	return d.Cert.ARICertID
}

func domainNames(ds []*Domain) []string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Name
	}
	return names
}

// parseLeaf returns the first certificate of a PEM chain.
func parseLeaf(chain []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, chain = pem.Decode(chain)
		if b == nil {
			return nil, errors.New("no certificate in the chain")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// Clock is the database's clock, advanced by our monotonic clock since the
// pass loaded its state (Store.Load starts it, before any worker does):
// instants from PostgreSQL and from the CA are compared with it, never with
// this host's wall clock.
type Clock struct {
	at     time.Time // the database's clock when the pass loaded its state
	loaded time.Time // our clock (monotonic) at the same moment
}

// set starts the clock at the database's instant at, read just now.
func (c *Clock) set(at time.Time) { c.at, c.loaded = at, time.Now() }

// At is the database's clock when the pass loaded its state.
func (c *Clock) At() time.Time { return c.at }

// Now is the database's clock now.
func (c *Clock) Now() time.Time { return c.at.Add(time.Since(c.loaded)) }

// budgetLatch remembers that the order budget was found spent: the pass
// places no more orders (the budget only frees as old orders age out of the
// window, far later than a pass lasts).
type budgetLatch struct {
	mu  sync.Mutex
	out bool
}

func (b *budgetLatch) spent() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out
}

// markSpent latches the budget as spent and reports whether it was the first
// to (the one to log it).
func (b *budgetLatch) markSpent() (first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	first, b.out = !b.out, true
	return first
}
