// Package keyring seals the certificate renewer's private keys at rest
// (AES-256-GCM) and opens them again: the renewer seals, and every reader of
// its tables (the TLS servers' certificate source, certs sync) opens. It has
// no other dependency, so a web server can import it without the renewer.
//
// A blob names the key that sealed it and is authenticated with the row it is
// stored in (the AAD: CertificateAAD, AccountAAD), so a blob copied to another
// row does not open. What it does not do: keep keys out of the process's
// memory, or tell a wrong key from a tampered blob beyond ErrUnknownKey and
// ErrSealed.
package keyring

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Errors of Keyring.Open. Both mean the blob cannot be read with this keyring;
// neither says anything about the key material.
var (
	// ErrUnknownKey: the blob was sealed with a key that is not in the keyring
	// (a key removed too early during a rotation, or another deployment's).
	ErrUnknownKey = errors.New("certrenew: sealed with a key that is not in the keyring")
	// ErrSealed: the blob is malformed, was tampered with, or belongs to
	// another row (the row is authenticated with the blob).
	ErrSealed = errors.New("certrenew: sealed data does not authenticate")
)

// KeySize is the size of an encryption key: AES-256.
const KeySize = 32

const (
	sealVersion = 1
	keyIDSize   = 8
)

// Keyring holds the keys that seal private keys at rest (AES-256-GCM). The
// first key seals; every key opens what it sealed. Rotation: add the new key
// second everywhere, then move it first (the leader re-seals every stored key
// on its next pass), then remove the old one. A Keyring never prints its keys:
// String, GoString and LogValue show only the key ids.
type Keyring struct {
	keys []ringKey
}

type ringKey struct {
	id   [keyIDSize]byte
	aead cipher.AEAD
}

// Parse reads keys, one per line, each the standard base64 encoding of
// 32 random bytes (e.g. `openssl rand -base64 32`). Blank lines and lines
// starting with # are ignored. The first key is the sealing key. Errors name
// the line, never its content.
func Parse(data []byte) (*Keyring, error) {
	k := &Keyring{}
	seen := map[[keyIDSize]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("certrenew: encryption key on line %d is not base64", n)
		}
		if len(raw) != KeySize {
			return nil, fmt.Errorf("certrenew: encryption key on line %d has %d bytes, want %d (openssl rand -base64 32)", n, len(raw), KeySize)
		}
		rk, err := newRingKey(raw)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[rk.id]; dup {
			return nil, fmt.Errorf("certrenew: encryption key on line %d repeats the key on line %d", n, first)
		}
		seen[rk.id] = n
		k.keys = append(k.keys, rk)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("certrenew: read encryption keys: %w", err)
	}
	if len(k.keys) == 0 {
		return nil, errors.New("certrenew: no encryption key (one base64 line of 32 bytes: openssl rand -base64 32)")
	}
	return k, nil
}

func newRingKey(raw []byte) (ringKey, error) {
	block, err := aes.NewCipher(raw)
	if err != nil {
		return ringKey{}, fmt.Errorf("certrenew: encryption key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return ringKey{}, fmt.Errorf("certrenew: encryption key: %w", err)
	}
	// The id is a hash of the key under a fixed label: it names the key in
	// rows and logs without revealing it.
	h := sha256.Sum256(append([]byte("snip-jobs certrenew key id\x00"), raw...))
	var rk ringKey
	copy(rk.id[:], h[:keyIDSize])
	rk.aead = aead
	return rk, nil
}

// KeyID names the sealing key (hex of a hash prefix), as stored in key_id
// columns.
func (k *Keyring) KeyID() string { return hex.EncodeToString(k.keys[0].id[:]) }

// KeyIDs names every key of the ring, the sealing key first.
func (k *Keyring) KeyIDs() []string {
	ids := make([]string, len(k.keys))
	for i, rk := range k.keys {
		ids[i] = hex.EncodeToString(rk.id[:])
	}
	return ids
}

// Seal encrypts plaintext with the sealing key. aad binds the blob to where it
// is stored (a domain, a directory URL): opened with another aad it fails.
func (k *Keyring) Seal(plaintext []byte, aad string) []byte {
	rk := k.keys[0]
	out := make([]byte, 0, 1+keyIDSize+rk.aead.NonceSize()+len(plaintext)+rk.aead.Overhead())
	out = append(out, sealVersion)
	out = append(out, rk.id[:]...)
	nonce := make([]byte, rk.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic("certrenew: crypto/rand failed: " + err.Error()) // cannot happen on Linux
	}
	out = append(out, nonce...)
	return rk.aead.Seal(out, nonce, plaintext, []byte(aad))
}

// Open decrypts a blob made by Seal with the same aad, with whichever key of
// the ring sealed it. It returns ErrUnknownKey or ErrSealed (wrapped) when it
// cannot.
func (k *Keyring) Open(blob []byte, aad string) ([]byte, error) {
	if len(blob) < 1+keyIDSize || blob[0] != sealVersion {
		return nil, fmt.Errorf("%w: not a version %d blob", ErrSealed, sealVersion)
	}
	var id [keyIDSize]byte
	copy(id[:], blob[1:1+keyIDSize])
	for _, rk := range k.keys {
		if rk.id != id {
			continue
		}
		rest := blob[1+keyIDSize:]
		if len(rest) < rk.aead.NonceSize()+rk.aead.Overhead() {
			return nil, fmt.Errorf("%w: too short", ErrSealed)
		}
		nonce, ct := rest[:rk.aead.NonceSize()], rest[rk.aead.NonceSize():]
		pt, err := rk.aead.Open(nil, nonce, ct, []byte(aad))
		if err != nil {
			return nil, fmt.Errorf("%w (key %s)", ErrSealed, hex.EncodeToString(id[:]))
		}
		return pt, nil
	}
	return nil, fmt.Errorf("%w: key %s", ErrUnknownKey, hex.EncodeToString(id[:]))
}

// SealedWith returns the key id a blob names, "" if it names none.
func SealedWith(blob []byte) string {
	if len(blob) < 1+keyIDSize || blob[0] != sealVersion {
		return ""
	}
	return hex.EncodeToString(blob[1 : 1+keyIDSize])
}

// String shows the key ids only.
func (k *Keyring) String() string {
	if k == nil {
		return "keyring.Keyring(nil)"
	}
	return "keyring.Keyring{ids: " + strings.Join(k.KeyIDs(), ",") + "}"
}

// GoString is String: %#v must not print keys either.
func (k *Keyring) GoString() string { return k.String() }

// LogValue shows the key ids only.
func (k *Keyring) LogValue() slog.Value { return slog.StringValue(k.String()) }

// CertificateAAD is what a certificate's private key is sealed with: its row's
// domain.
func CertificateAAD(domain string) string { return "snip-jobs certrenew certificate key\x00" + domain }

// AccountAAD is what the ACME account's key is sealed with: its directory URL.
func AccountAAD(directory string) string { return "snip-jobs certrenew account key\x00" + directory }

// KeyPEM encodes a private key as PKCS #8 PEM: what is sealed.
func KeyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKeyPEM decodes what KeyPEM encoded.
func ParseKeyPEM(b []byte) (crypto.Signer, error) {
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
