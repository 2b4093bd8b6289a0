// Package etcdtlstest makes what an etcd with TLS and authentication needs in
// tests and in the fault-injection harness: a certificate authority with a
// server certificate and client certificates (ECDSA P-256, short validity,
// written as PEM files), and the users, role and permissions that
// docs/operations.md gives as etcdctl commands, run through the client API
// (Grant).
//
// It is a test kit: the production binary never links it (check with `go list
// -deps ./cmd/snip-jobs`). Nothing here is a mock: the files are what a real
// etcd and a real client load, and Grant runs the real RPCs.
package etcdtlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity of the certificates NewPKI issues: long enough for any test run,
// short enough that a leaked file is soon worthless.
const Validity = 2 * time.Hour

// PKI is a certificate authority and what it signed, as PEM files in Dir.
type PKI struct {
	Dir string
	// CA is the authority's certificate: the trusted CA of the servers (for
	// client certificates) and of the clients (for the server certificate).
	CA string
	// ServerCert and ServerKey are the etcd members' certificate, for
	// 127.0.0.1 and localhost.
	ServerCert, ServerKey string
	// ClientCert and ClientKey authenticate a client (snip-jobs, the harness).
	ClientCert, ClientKey string

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// NewPKI creates a CA in dir, a server certificate and a client certificate
// signed by it, each valid from a minute ago for Validity.
func NewPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	var err error
	p.caCert, p.caKey, err = newCA(dir, "ca")
	if err != nil {
		return nil, err
	}
	p.CA = filepath.Join(dir, "ca.pem")
	now := time.Now()
	if p.ServerCert, p.ServerKey, err = p.issue("server", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "etcd member"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		NotBefore:   now.Add(-time.Minute), NotAfter: now.Add(Validity),
	}); err != nil {
		return nil, err
	}
	if p.ClientCert, p.ClientKey, err = p.Client("client", now.Add(-time.Minute), now.Add(Validity)); err != nil {
		return nil, err
	}
	return p, nil
}

// Client issues another client certificate valid from notBefore to notAfter
// (a notAfter in the past makes an expired one), as name.pem and name-key.pem.
func (p *PKI) Client(name string, notBefore, notAfter time.Time) (cert, key string, err error) {
	return p.issue(name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "snip-jobs " + name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore:   notBefore, NotAfter: notAfter,
	})
}

// CertUser issues a client certificate whose subject's common name is user,
// valid for Validity, as user.pem and user-key.pem. etcd, with client
// certificates required, takes a verified certificate's common name as the
// user of a request that carries no token: the certificate alone logs that
// user in (for clients that cannot send a password, such as
// kube-apiserver). AddCertUser creates the user.
func (p *PKI) CertUser(user string) (cert, key string, err error) {
	now := time.Now()
	return p.issue(user, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore:   now.Add(-time.Minute), NotAfter: now.Add(Validity),
	})
}

// OtherCA creates, in dir, a CA that signed nothing the PKIs of this package
// use (name.pem): trusting it instead of the right one is the "wrong CA"
// mistake.
func OtherCA(dir, name string) (string, error) {
	if _, _, err := newCA(dir, name); err != nil {
		return "", err
	}
	return filepath.Join(dir, name+".pem"), nil
}

func newCA(dir, name string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "snip-jobs test CA " + name},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(filepath.Join(dir, name+".pem"), "CERTIFICATE", der); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

// issue signs tmpl with the CA and writes name.pem and name-key.pem.
func (p *PKI) issue(name string, tmpl *x509.Certificate) (cert, key string, err error) {
	if p.caKey == nil {
		return "", "", errors.New("etcdsecure: this PKI has no CA key")
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl.SerialNumber = serial()
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &k.PublicKey, p.caKey)
	if err != nil {
		return "", "", fmt.Errorf("etcdsecure: sign %s: %w", name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", "", err
	}
	cert, key = filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem")
	if err := writePEM(cert, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	if err := writePEM(key, "PRIVATE KEY", kder); err != nil {
		return "", "", err
	}
	return cert, key, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// writePEM writes one PEM block, readable by its owner only (keys are secrets;
// certificates need not be, but one mode for all keeps it simple).
func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
