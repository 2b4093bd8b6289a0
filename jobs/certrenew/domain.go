package certrenew

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"time"
)

// domain is one certificate name and what PostgreSQL holds about it.
type domain struct {
	name    string // ASCII: what the certificate is for
	source  string // the custom_domains row it came from
	addedAt time.Time

	// certrenew_domains
	orderID      *int64
	orderToken   *int64
	orderStarted *time.Time
	orderKey     []byte // sealed
	attempt      int
	failures     int
	nextAttempt  *time.Time
	lastError    *string

	cert *storedCert // the current certificate, nil if none
}

type storedCert struct {
	id           int64
	leaf         *x509.Certificate
	notBefore    time.Time
	notAfter     time.Time
	renewAt      time.Time
	ariStart     *time.Time
	ariEnd       *time.Time
	ariNextCheck time.Time
	ariCertID    string
	token        int64
}

type invalidDomain struct {
	domain string
	err    *InvalidNameError
}

// state is the domain's certificate state at now (the metric's label).
func (d *domain) state(now time.Time) string {
	if d.cert == nil {
		return stateAt(now, d.failures, nil, nil)
	}
	return stateAt(now, d.failures, &d.cert.notAfter, &d.cert.renewAt)
}

// stateAt is the state of a valid name at now, given its failures and its
// current certificate's not-after and renewal instant (nil: no certificate).
func stateAt(now time.Time, failures int, notAfter, renewAt *time.Time) string {
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

// replacesOf is the ARI identifier of the certificate an order for d
// replaces; "" when d has none.
func replacesOf(d *domain) string {
	if d.cert == nil {
		return ""
	}
	return d.cert.ariCertID
}

func domainNames(ds []*domain) []string {
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.name
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
