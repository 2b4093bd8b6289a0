package certrenew

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
)

// The keyring lives in its own package so that readers of the renewer's
// tables (a TLS server's certificate source) need not link the renewer.
type (
	// Keyring seals private keys at rest; see package keyring.
	Keyring = keyring.Keyring
)

// KeySize is the size of an encryption key: AES-256.
const KeySize = keyring.KeySize

// Errors of Keyring.Open; see package keyring.
var (
	ErrUnknownKey = keyring.ErrUnknownKey
	ErrSealed     = keyring.ErrSealed
)

// ParseKeyring reads keys, one per line (keyring.Parse).
func ParseKeyring(data []byte) (*Keyring, error) { return keyring.Parse(data) }

func aadCert(domain string) string       { return keyring.CertificateAAD(domain) }
func aadAccount(directory string) string { return keyring.AccountAAD(directory) }
func sealedWith(blob []byte) string      { return keyring.SealedWith(blob) }

// keyPEM encodes a private key as PKCS #8 PEM.
func keyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseKeyPEM(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T is not a signing key", k)
	}
	return s, nil
}
