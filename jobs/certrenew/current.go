package certrenew

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
)

// ErrNoCertificate is returned by Current for a name without a current
// certificate.
var ErrNoCertificate = errors.New("certrenew: no current certificate")

// Certificate is a stored certificate with its private key opened.
type Certificate struct {
	ID        int64
	Domain    string // the ASCII name it is for
	ChainPEM  []byte // leaf first, then the issuer(s)
	KeyPEM    []byte // PKCS #8
	Serial    string // hex
	NotBefore time.Time
	NotAfter  time.Time
	RenewAt   time.Time
	Token     int64 // the term that stored it
	Instance  string
}

// Querier is what Current reads through: a *pgxpool.Pool, *pgx.Conn or
// pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Current returns the current certificate of domain (its ASCII name, as
// NormalizeDomain returns it) with the private key opened by keys. It is what
// Snip's TLS servers load; it fails with ErrUnknownKey or ErrSealed when keys
// does not hold the key the private key was sealed with.
func Current(ctx context.Context, db Querier, keys *keyring.Keyring, domain string) (*Certificate, error) {
	c := &Certificate{Domain: domain}
	var chain string
	var sealed []byte
	err := db.QueryRow(ctx, `SELECT id, chain_pem, key_sealed, serial, not_before, not_after, renew_at, token, instance
		FROM certrenew_certificates WHERE domain = $1 AND current`, domain).
		Scan(&c.ID, &chain, &sealed, &c.Serial, &c.NotBefore, &c.NotAfter, &c.RenewAt, &c.Token, &c.Instance)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w for %s", ErrNoCertificate, domain)
	}
	if err != nil {
		return nil, fmt.Errorf("certrenew: read the certificate of %s: %w", domain, err)
	}
	key, err := keys.Open(sealed, keyring.CertificateAAD(domain))
	if err != nil {
		return nil, fmt.Errorf("certrenew: private key of %s (certificate %d): %w", domain, c.ID, err)
	}
	c.ChainPEM, c.KeyPEM = []byte(chain), key
	return c, nil
}

// TLSCertificate returns the certificate for a tls.Config.
func (c *Certificate) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(c.ChainPEM, c.KeyPEM)
}
