package certserve

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
)

// Certificate is a current certificate as served: parsed, its key opened.
// It is never modified once published; treat it as read-only.
type Certificate struct {
	Domain    string // the ASCII name, as the renewer stores it
	ID        int64  // the row in certrenew_certificates
	Serial    string // hex
	NotBefore time.Time
	NotAfter  time.Time
	ChainPEM  []byte // leaf first
	KeyPEM    []byte // PKCS #8, opened
	TLS       *tls.Certificate
}

// UnknownNameError fails a handshake for a name without a current
// certificate (or without a name).
type UnknownNameError struct{ Name string }

func (e *UnknownNameError) Error() string {
	if e.Name == "" {
		return "certserve: the client sent no server name (SNI)"
	}
	return "certserve: no certificate for " + e.Name
}

// Certificates holds every current certificate in memory, for
// tls.Config.GetCertificate and for the certsync job's files. Run keeps it
// current.
type Certificates struct {
	feed feed
	keys *keyring.Keyring
	m    *certMetrics

	byName atomic.Pointer[map[string]*Certificate] // replaced whole on each change

	mu        sync.Mutex
	changed   chan struct{} // closed at the next change
	ready     chan struct{} // closed after the first full read
	readyOnce sync.Once
	failed    map[int64]bool // rows whose key did not open, logged once (feed goroutine only)
}

// NewCertificates makes the source; keys opens the private keys (the
// renewer's key_file). Call Run to fill it and keep it current.
func NewCertificates(cfg Config, keys *keyring.Keyring) (*Certificates, error) {
	cfg, err := cfg.check("certificates")
	if err != nil {
		return nil, err
	}
	if keys == nil {
		return nil, fmt.Errorf("certserve: certificates: a keyring is required to open the private keys")
	}
	c := &Certificates{keys: keys, m: newCertMetrics(cfg.Metrics), changed: make(chan struct{}),
		ready: make(chan struct{}), failed: map[int64]bool{}}
	empty := map[string]*Certificate{}
	c.byName.Store(&empty)
	c.feed = feed{cfg: cfg, channel: "certrenew_certificates", m: newFeedMetrics(cfg.Metrics, "certificates"),
		load: c.load, apply: c.apply, loaded: func() { c.readyOnce.Do(func() { close(c.ready) }) }}
	return c, nil
}

// Run reads every current certificate, then follows the renewer's changes
// until ctx ends. It returns ctx's error.
func (c *Certificates) Run(ctx context.Context) error { return c.feed.run(ctx) }

// Ready is closed once every current certificate has been read.
func (c *Certificates) Ready() <-chan struct{} { return c.ready }

// Changed returns a channel closed at the next change of what is served:
// take it, read (Lookup, All), then wait on it.
func (c *Certificates) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// GetCertificate is tls.Config.GetCertificate: the certificate of the
// client's server name, from memory. An unknown name fails at once.
func (c *Certificates) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := normalizeName(hello.ServerName)
	if crt, ok := (*c.byName.Load())[name]; ok {
		c.m.servedTLS.Inc()
		return crt.TLS, nil
	}
	c.m.unknown.Inc()
	return nil, &UnknownNameError{Name: name}
}

// Lookup returns name's current certificate, if one is served.
func (c *Certificates) Lookup(name string) (*Certificate, bool) {
	crt, ok := (*c.byName.Load())[normalizeName(name)]
	return crt, ok
}

// All returns every served certificate by domain. The map is a snapshot; do
// not modify it.
func (c *Certificates) All() map[string]*Certificate { return *c.byName.Load() }

// normalizeName is the form the renewer stores names in: lower case, no
// trailing dot.
func normalizeName(n string) string { return strings.TrimSuffix(strings.ToLower(n), ".") }

// rowColumns are what a served certificate is made of. The chain and key are
// NULL for rows already served (same id): a full read transfers only what
// changed.
const rowColumns = `id, domain, serial, not_before, not_after,
	CASE WHEN id = ANY($1) THEN NULL ELSE chain_pem END, CASE WHEN id = ANY($1) THEN NULL ELSE key_sealed END`

// load reads every current certificate, reusing those already served.
func (c *Certificates) load(ctx context.Context, conn *pgx.Conn) error {
	old := *c.byName.Load()
	rows, err := conn.Query(ctx, `SELECT `+rowColumns+` FROM certrenew_certificates WHERE current`, servedIDs(old))
	if err != nil {
		return err
	}
	next := make(map[string]*Certificate, len(old))
	err = c.scan(ctx, rows, old, func(crt *Certificate) { next[crt.Domain] = crt })
	if err != nil {
		return err
	}
	c.publish(next)
	return nil
}

// apply re-reads the domain a notification names.
func (c *Certificates) apply(ctx context.Context, conn *pgx.Conn, domain string) error {
	old := *c.byName.Load()
	var ids []int64
	if crt, ok := old[domain]; ok {
		ids = []int64{crt.ID}
	}
	rows, err := conn.Query(ctx, `SELECT `+rowColumns+` FROM certrenew_certificates WHERE current AND domain = $2`, ids, domain)
	if err != nil {
		return err
	}
	var found *Certificate
	if err := c.scan(ctx, rows, old, func(crt *Certificate) { found = crt }); err != nil {
		return err
	}
	if found == old[domain] {
		return nil // unchanged: a row of the domain that is not the current one, or a re-seal
	}
	next := make(map[string]*Certificate, len(old)+1)
	for d, crt := range old {
		next[d] = crt
	}
	delete(next, domain)
	if found != nil {
		next[domain] = found
	}
	c.publish(next)
	return nil
}

// scan turns rows into served certificates: a row already served (its chain
// NULL) is the old value; a new one is opened. A row whose key does not open
// is skipped and logged once; the domain keeps what it had, if anything.
func (c *Certificates) scan(ctx context.Context, rows pgx.Rows, old map[string]*Certificate, keep func(*Certificate)) error {
	defer rows.Close()
	for rows.Next() {
		crt := &Certificate{}
		var chain, sealed []byte
		if err := rows.Scan(&crt.ID, &crt.Domain, &crt.Serial, &crt.NotBefore, &crt.NotAfter, &chain, &sealed); err != nil {
			return err
		}
		if chain == nil {
			if prev, ok := old[crt.Domain]; ok && prev.ID == crt.ID {
				keep(prev)
			}
			continue
		}
		if err := c.open(crt, chain, sealed); err != nil {
			c.skip(ctx, crt, sealed, err)
			if prev, ok := old[crt.Domain]; ok {
				keep(prev)
			}
			continue
		}
		keep(crt)
	}
	return rows.Err()
}

// open decrypts the key and parses the pair, once per certificate.
func (c *Certificates) open(crt *Certificate, chain, sealed []byte) error {
	key, err := c.keys.Open(sealed, keyring.CertificateAAD(crt.Domain))
	if err != nil {
		return err
	}
	pair, err := tls.X509KeyPair(chain, key)
	if err != nil {
		return fmt.Errorf("the chain and key do not make a pair: %w", err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return err
		}
	}
	crt.ChainPEM, crt.KeyPEM, crt.TLS = chain, key, &pair
	return nil
}

func (c *Certificates) skip(ctx context.Context, crt *Certificate, sealed []byte, err error) {
	c.m.skipped.Inc()
	if c.failed[crt.ID] {
		return
	}
	c.failed[crt.ID] = true
	c.feed.cfg.Log.ErrorContext(ctx, "certserve: certificate skipped: its private key cannot be opened; the domain keeps what it was served before, if anything",
		"domain", crt.Domain, "certificate_id", crt.ID, "sealed_with", keyring.SealedWith(sealed), "err", err)
}

// publish makes next what is served and wakes those waiting on Changed.
func (c *Certificates) publish(next map[string]*Certificate) {
	c.byName.Store(&next)
	c.m.served.Set(float64(len(next)))
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

func servedIDs(m map[string]*Certificate) []int64 {
	ids := make([]int64, 0, len(m))
	for _, crt := range m {
		ids = append(ids, crt.ID)
	}
	return ids
}

type certMetrics struct {
	served  prometheus.Gauge
	skipped prometheus.Counter
	// handshakes by result, resolved once: GetCertificate is a hot path.
	servedTLS, unknown prometheus.Counter
}

func newCertMetrics(reg prometheus.Registerer) *certMetrics {
	m := &certMetrics{
		served: prometheus.NewGauge(prometheus.GaugeOpts{Name: "snip_certserve_certificates",
			Help: "Certificates served from memory."}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "snip_certserve_certificates_skipped_total",
			Help: "Certificate rows read whose private key did not open (logged once each with the domain)."}),
	}
	handshakes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "snip_certserve_handshakes_total",
		Help: "Certificates asked for by TLS handshakes: served, or unknown_name (failed at once)."}, []string{"result"})
	m.servedTLS, m.unknown = handshakes.WithLabelValues("served"), handshakes.WithLabelValues("unknown_name")
	if reg != nil {
		reg.MustRegister(m.served, m.skipped, handshakes)
	}
	return m
}
