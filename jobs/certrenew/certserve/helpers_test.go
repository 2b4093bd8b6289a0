package certserve_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/certtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }

// fixture is a database with the renewer's schema, a keyring, and a CA that
// issues the certificates a renewer would have stored.
type fixture struct {
	t     testing.TB
	url   string
	pool  *pgxpool.Pool
	keys  *keyring.Keyring
	caKey *ecdsa.PrivateKey
	caCrt *x509.Certificate
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	url, pool := dbtest.New(t)
	f := &fixture{t: t, url: url, pool: pool, keys: newKeyring(t)}
	f.caKey = newECKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "certserve test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &f.caKey.PublicKey, f.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if f.caCrt, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	benchtest.Exec(t, pool, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return f
}

func newKeyring(t testing.TB) *keyring.Keyring {
	t.Helper()
	b := make([]byte, keyring.KeySize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	k, err := keyring.Parse([]byte(base64.StdEncoding.EncodeToString(b)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newECKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// store does what the renewer's storing transaction does: the domain's
// current certificate becomes a new one, its key sealed with keys. It returns
// the new serial.
func (f *fixture) store(domain string, keys *keyring.Keyring) string {
	f.t.Helper()
	return f.storeWith(domain, keys, "")
}

// storeSilently stores as store does with the triggers off for the
// transaction (session_replication_role = replica): no reader is notified.
func (f *fixture) storeSilently(domain string) string {
	f.t.Helper()
	return f.storeWith(domain, f.keys, `SET LOCAL session_replication_role = replica`)
}

func (f *fixture) storeWith(domain string, keys *keyring.Keyring, first string) string {
	f.t.Helper()
	serial, chain, key := f.issue(domain)
	f.storeIssuedWith(domain, serial, chain, key, keys, first)
	return serial
}

// storeIssued stores an issued certificate as the renewer does and returns
// when the transaction committed.
func (f *fixture) storeIssued(domain, serial, chain string, key []byte) time.Time {
	f.t.Helper()
	return f.storeIssuedWith(domain, serial, chain, key, f.keys, "")
}

func (f *fixture) storeIssuedWith(domain, serial, chain string, key []byte, keys *keyring.Keyring, first string) time.Time {
	f.t.Helper()
	err := pgx.BeginFunc(context.Background(), f.pool, func(tx pgx.Tx) error {
		if first != "" {
			if _, err := tx.Exec(context.Background(), first); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(context.Background(), `UPDATE certrenew_certificates SET current = false WHERE domain = $1 AND current`, domain); err != nil {
			return err
		}
		_, err := tx.Exec(context.Background(), `INSERT INTO certrenew_certificates (domain, chain_pem, key_sealed, key_id, serial,
				ari_cert_id, not_before, not_after, renew_at, ari_next_check, token, instance)
			VALUES ($1, $2, $3, $4, $5, 'ari', now() - interval '1 hour', now() + interval '1 day', now() + interval '12 hours', now(), 1, 'test')`,
			domain, chain, keys.Seal(key, keyring.CertificateAAD(domain)), keys.KeyID(), serial)
		return err
	})
	if err != nil {
		f.t.Fatalf("store a certificate for %s: %v", domain, err)
	}
	return time.Now()
}

// issue makes a certificate for domain signed by the fixture's CA.
func (f *fixture) issue(domain string) (serial, chainPEM string, keyPEM []byte) {
	f.t.Helper()
	key := newECKey(f.t)
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		f.t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: domain}, DNSNames: []string{domain},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, f.caCrt, &key.PublicKey, f.caKey)
	if err != nil {
		f.t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		f.t.Fatal(err)
	}
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return hex.EncodeToString(sn.Bytes()), string(chain), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
}

func (f *fixture) config() certserve.Config {
	f.t.Helper()
	cc, err := pgx.ParseConfig(f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	cc.RuntimeParams["application_name"] = "certserve test"
	return certserve.Config{DB: cc, Log: benchtest.Logger(f.t)}
}

// certificates starts a source on the fixture's database and waits until it
// has read everything.
func (f *fixture) certificates(keys *keyring.Keyring) *certserve.Certificates {
	f.t.Helper()
	src, err := certserve.NewCertificates(f.config(), keys)
	if err != nil {
		f.t.Fatal(err)
	}
	certtest.Run(f.t, src.Run, src.Ready())
	return src
}

// run runs a reader until the test ends.

func waitFor(t testing.TB, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(benchtest.Patience):
		t.Fatalf("waited %v for %s", benchtest.Patience, what)
	}
}

// waitServed waits (on Changed) until src serves serial for domain.
func waitServed(t testing.TB, src *certserve.Certificates, domain, serial string) {
	t.Helper()
	deadline := time.After(benchtest.Patience)
	for {
		changed := src.Changed()
		if crt, ok := src.Lookup(domain); ok && crt.Serial == serial {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("waited %v for %s to be served with serial %s", benchtest.Patience, domain, serial)
		}
	}
}

// readerQueries is how many statements reading the renewer's certificates
// or challenges PostgreSQL ran on the fixture's database
// (pg_stat_statements, counted by the server): the readers' and any
// per-request lookup's.
func (f *fixture) readerQueries() int64 {
	f.t.Helper()
	return benchtest.Value[int64](f.t, f.pool, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query ILIKE 'SELECT%' AND query NOT LIKE '%pg_stat_statements%'
		  AND (query LIKE '%certrenew_certificates%' OR query LIKE '%certrenew_challenges%')`)
}

// tlsServer serves TLS handshakes with src's certificates on loopback.
func tlsServer(t testing.TB, src *certserve.Certificates) string {
	t.Helper()
	return tlsServerWith(t, &tls.Config{GetCertificate: src.GetCertificate})
}

// tlsServerWith serves TLS handshakes with cfg on loopback.
func tlsServerWith(t testing.TB, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	return ln.Addr().String()
}

// handshake connects to addr naming domain and returns the serial of the
// certificate the server presented, verified against the fixture's CA.
func (f *fixture) handshake(addr, domain string) (string, error) {
	roots := x509.NewCertPool()
	roots.AddCert(f.caCrt)
	d := net.Dialer{Timeout: benchtest.Patience}
	c, err := tls.DialWithDialer(&d, "tcp", addr, &tls.Config{ServerName: domain, RootCAs: roots})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return hex.EncodeToString(c.ConnectionState().PeerCertificates[0].SerialNumber.Bytes()), nil
}
