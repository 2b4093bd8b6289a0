package domainstore

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/go-acme/lego/v5/acme/api"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
)

// The domain store's writes about one domain's order: recorded before the CA
// hears of it, then its certificate made current or its failure backed off.
// Each is fenced (RecordURLs aside), and reflected in the domain only once
// committed.

// ErrBudget: the order budget of the last 3 hours is spent.
var ErrBudget = errors.New("certrenew: order budget spent")

// BeginOrder checks the budget and records the order in flight, in one
// fenced transaction. All fenced transactions of the job hold the same
// fencing row until they commit, so two workers cannot both take the last
// order of the budget. The certificate key (orderKey) is stored, sealed, with
// the order.
func (s *Store) BeginOrder(ctx context.Context, d *Domain, replaces string, log *slog.Logger) (int64, crypto.Signer, error) {
	if s.budget.spent() {
		return 0, nil, ErrBudget
	}
	key, sealed, err := s.orderKey(d)
	if err != nil {
		return 0, nil, err
	}
	var orderID int64
	var used int
	err = s.c.Run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM certrenew_orders WHERE started_at > now() - make_interval(secs => $1)`,
			BudgetWindow.Seconds()).Scan(&used); err != nil {
			return err
		}
		if used >= s.c.Policy.OrderBudget {
			return ErrBudget
		}
		var err error
		orderID, err = s.insertOrder(ctx, tx, d, replaces, sealed)
		return err
	})
	if errors.Is(err, ErrBudget) {
		first := s.budget.markSpent()
		s.c.Failures.WithLabelValues(s.c.Run.Job, "budget").Inc()
		if first {
			s.c.Log.WarnContext(ctx, "order budget spent: no more orders until older ones leave the window",
				"budget", s.c.Policy.OrderBudget, "window", BudgetWindow, "used", used)
		}
		log.InfoContext(ctx, "due, but the order budget is spent")
		return 0, nil, ErrBudget
	}
	if err != nil {
		return 0, nil, err
	}
	if d.OrderID != nil {
		log.InfoContext(ctx, "resuming an order an earlier term left in flight", "earlier_order_id", *d.OrderID,
			"earlier_token", deref(d.orderToken), "order_id", orderID, "replaces", replaces)
	} else {
		log.InfoContext(ctx, "ordering", "order_id", orderID, "replaces", replaces, "renewal", replaces != "")
	}
	d.OrderID, d.orderToken, d.orderKey, d.attempt = &orderID, &s.c.Run.Token, sealed, d.attempt+1
	return orderID, key, nil
}

// insertOrder writes, in tx, the order in flight for d (abandoning the one
// an earlier term left) and returns its id.
func (s *Store) insertOrder(ctx context.Context, tx pgx.Tx, d *Domain, replaces string, sealed []byte) (int64, error) {
	if d.OrderID != nil {
		if _, err := tx.Exec(ctx, `UPDATE certrenew_orders SET result = 'abandoned', finished_at = now(),
			error = 'the term that placed it ended before it finished' WHERE id = $1 AND result IS NULL`, *d.OrderID); err != nil {
			return 0, err
		}
	}
	var rep *string
	if replaces != "" {
		rep = &replaces
	}
	var orderID int64
	if err := tx.QueryRow(ctx, `INSERT INTO certrenew_orders (domain, token, instance, replaces) VALUES ($1, $2, $3, $4) RETURNING id`,
		d.Name, s.c.Run.Token, s.c.Run.Instance, rep).Scan(&orderID); err != nil {
		return 0, err
	}
	_, err := tx.Exec(ctx, `INSERT INTO certrenew_domains AS s (domain, source, order_id, order_token, order_instance, order_started_at,
			order_replaces, order_key_sealed, order_key_id, attempt, token)
		VALUES ($1, $2, $3, $4, $5, now(), $6, $7, $8, 1, $4)
		ON CONFLICT (domain) DO UPDATE SET source = EXCLUDED.source, order_id = EXCLUDED.order_id,
			order_token = EXCLUDED.order_token, order_instance = EXCLUDED.order_instance,
			order_started_at = EXCLUDED.order_started_at, order_replaces = EXCLUDED.order_replaces,
			order_key_sealed = EXCLUDED.order_key_sealed, order_key_id = EXCLUDED.order_key_id,
			attempt = s.attempt + 1, token = EXCLUDED.token, updated_at = now()`,
		d.Name, d.source, orderID, s.c.Run.Token, s.c.Run.Instance, rep, sealed, s.c.Keys.KeyID())
	return orderID, err
}

// orderKey is the certificate key of d's next order, and its sealed form:
// the key of the order an earlier term left in flight (re-sealed with the
// sealing key), or else a new one.
func (s *Store) orderKey(d *Domain) (crypto.Signer, []byte, error) {
	k, err := s.OpenOrderKey(d) // resealed below with the sealing key
	if err != nil {
		if k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, nil, err
		}
	}
	pt, err := keyring.KeyPEM(k)
	if err != nil {
		return nil, nil, err
	}
	return k, s.c.Keys.Seal(pt, keyring.CertificateAAD(d.Name)), nil
}

// OpenOrderKey opens the certificate key sealed with the order d has in
// flight.
func (s *Store) OpenOrderKey(d *Domain) (crypto.Signer, error) {
	if d.orderKey == nil {
		return nil, errors.New("no key was recorded with the order")
	}
	pt, err := s.c.Keys.Open(d.orderKey, keyring.CertificateAAD(d.Name))
	if err != nil {
		return nil, err
	}
	return keyring.ParseKeyPEM(pt)
}

// Bounds of RecordURLs: it may take up to recordURLsMax while the term lasts
// (lego is waiting on it, and the pass on lego), and at most
// recordURLsAfterTerm once the term has ended, so as not to hold the
// hand-over.
const (
	recordURLsMax       = 30 * time.Second
	recordURLsAfterTerm = time.Second
)

// RecordURLs notes what the CA said about order orderID — its URL, and the
// certificate's once it is valid ("" for not known) — in
// certrenew_order_urls, outside the fence and even after the term ended
// (migrations/0008_certrenew_order_urls.sql). A failure only costs the next
// leader a second order.
func (s *Store) RecordURLs(ctx context.Context, d *Domain, orderID int64, orderURL, certURL string, log *slog.Logger) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordURLsMax)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(recordURLsAfterTerm, cancel) })
	defer stop()
	if _, err := s.c.Pool.Exec(wctx, `INSERT INTO certrenew_order_urls (order_id, domain, order_url, cert_url, token, instance)
		VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, ''), $5, $6)
		ON CONFLICT (order_id) DO UPDATE SET order_url = coalesce(EXCLUDED.order_url, certrenew_order_urls.order_url),
			cert_url = coalesce(EXCLUDED.cert_url, certrenew_order_urls.cert_url)`,
		orderID, d.Name, orderURL, certURL, s.c.Run.Token, s.c.Run.Instance); err != nil {
		log.WarnContext(ctx, "could not note the CA's URLs of the order (if this term cannot finish it, the next leader orders again)",
			"order_id", orderID, "err", err)
	}
}

// RecordedURLs reads what RecordURLs noted about order orderID, and the term
// that noted it; pgx.ErrNoRows when nothing was.
func (s *Store) RecordedURLs(ctx context.Context, orderID int64) (orderURL, certURL *string, token int64, err error) {
	err = s.c.Pool.QueryRow(ctx, `SELECT order_url, cert_url, token FROM certrenew_order_urls WHERE order_id = $1`, orderID).
		Scan(&orderURL, &certURL, &token)
	return orderURL, certURL, token, err
}

// ErrBadCertificate: StoreCert refused a certificate that does not match its order.
var ErrBadCertificate = errors.New("certrenew: the CA's certificate does not match the order")

// StoreCert makes the issued certificate the domain's current one and clears
// the order, in one fenced transaction. A certificate that does not match
// the order (ErrBadCertificate) is refused.
func (s *Store) StoreCert(ctx context.Context, d *Domain, orderID int64, res *certificate.Resource, key crypto.Signer,
	replaces string, conflict bool, log *slog.Logger) error {
	leaf, certID, err := checkIssued(d.Name, res.Certificate, key)
	if err != nil {
		return err
	}
	pemKey, err := keyring.KeyPEM(key)
	if err != nil {
		return err
	}
	renewAt := s.c.Policy.RenewAt(leaf.NotBefore, leaf.NotAfter)
	var rep *string
	if replaces != "" {
		rep = &replaces
	}
	var certRowID int64
	var prevID *int64
	err = s.c.Run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		prevID = nil
		err := tx.QueryRow(ctx, `UPDATE certrenew_certificates SET current = false WHERE domain = $1 AND current RETURNING id`, d.Name).Scan(&prevID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// The first ARI check is due at once: the next pass asks the CA for
		// the window; until then the fallback instant holds.
		if err := tx.QueryRow(ctx, `INSERT INTO certrenew_certificates (domain, chain_pem, key_sealed, key_id, serial, ari_cert_id,
				not_before, not_after, renew_at, ari_next_check, replaces_id, replaces_sent, ari_conflict, order_id, token, instance)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now(), $10, $11, $12, $13, $14, $15) RETURNING id`,
			d.Name, string(res.Certificate), s.c.Keys.Seal(pemKey, keyring.CertificateAAD(d.Name)), s.c.Keys.KeyID(),
			hex.EncodeToString(leaf.SerialNumber.Bytes()), certID, leaf.NotBefore, leaf.NotAfter, renewAt,
			prevID, rep, conflict, orderID, s.c.Run.Token, s.c.Run.Instance).Scan(&certRowID); err != nil {
			return err
		}
		return s.closeIssued(ctx, tx, d, orderID, conflict)
	})
	if err != nil {
		return err
	}
	s.c.Orders.WithLabelValues(s.c.Run.Job, "issued").Inc()
	log.InfoContext(ctx, "certificate stored", "certificate_id", certRowID, "order_id", orderID,
		"not_after", leaf.NotAfter, "renew_at", renewAt, "replaced_id", deref(prevID), "ari_renewal", replaces != "" && !conflict)
	d.Cert = &Cert{id: certRowID, Leaf: leaf, NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter, RenewAt: renewAt,
		ARINextCheck: s.c.Clock.Now(), ARICertID: certID, token: s.c.Run.Token}
	d.OrderID, d.orderToken, d.orderKey, d.Failures, d.NextAttempt, d.attempt = nil, nil, nil, 0, nil, 0
	return nil
}

// closeIssued marks order orderID issued and clears, in tx, d's order in
// flight and its back-off.
func (s *Store) closeIssued(ctx context.Context, tx pgx.Tx, d *Domain, orderID int64, conflict bool) error {
	if _, err := tx.Exec(ctx, `UPDATE certrenew_domains SET order_id = NULL, order_token = NULL, order_instance = NULL,
			order_started_at = NULL, order_replaces = NULL, order_key_sealed = NULL, order_key_id = NULL,
			attempt = 0, failures = 0, next_attempt_at = NULL, last_error = NULL, last_error_reason = NULL,
			last_error_at = NULL, token = $2, updated_at = now()
		WHERE domain = $1`, d.Name, s.c.Run.Token); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE certrenew_orders SET result = 'issued', finished_at = now(), ari_conflict = $2 WHERE id = $1`,
		orderID, conflict)
	return err
}

// checkIssued checks that chain is a certificate for name with key's public
// key and sane dates, and returns its leaf and ARI identifier; otherwise an
// ErrBadCertificate.
func checkIssued(name string, chain []byte, key crypto.Signer) (*x509.Certificate, string, error) {
	leaf, err := parseLeaf(chain)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	if !slices.Contains(leaf.DNSNames, name) {
		return nil, "", fmt.Errorf("%w: issued for %v, not %s", ErrBadCertificate, leaf.DNSNames, name)
	}
	if !publicKeyEqual(leaf.PublicKey, key.Public()) {
		return nil, "", fmt.Errorf("%w: its public key is not the order's", ErrBadCertificate)
	}
	if !leaf.NotBefore.Before(leaf.NotAfter) {
		return nil, "", fmt.Errorf("%w: not-before %v is not before not-after %v", ErrBadCertificate, leaf.NotBefore, leaf.NotAfter)
	}
	certID, err := api.MakeARICertID(leaf)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	return leaf, certID, nil
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(equaler)
	return ok && ea.Equal(b)
}

// RecordFailure records that order orderID of d failed with err (for
// reason, a failure reason), its failures-th failure in a row: no order in
// flight any more, and none before wait has passed.
func (s *Store) RecordFailure(ctx context.Context, d *Domain, orderID int64, reason string, err error, failures int, wait time.Duration) error {
	msg := err.Error()
	if len(msg) > 2000 {
		msg = msg[:2000] + "…"
	}
	err = s.c.Run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE certrenew_domains SET order_id = NULL, order_token = NULL, order_instance = NULL,
				order_started_at = NULL, order_replaces = NULL, order_key_sealed = NULL, order_key_id = NULL,
				failures = $2, next_attempt_at = now() + make_interval(secs => $3), last_error = $4,
				last_error_reason = $5, last_error_at = now(), token = $6, updated_at = now()
			WHERE domain = $1`, d.Name, failures, wait.Seconds(), msg, reason, s.c.Run.Token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE certrenew_orders SET result = 'failed', finished_at = now(), reason = $2, error = $3 WHERE id = $1`,
			orderID, reason, msg)
		return err
	})
	if err != nil {
		return err
	}
	next := s.c.Clock.Now().Add(wait)
	d.Failures, d.NextAttempt, d.OrderID, d.orderToken, d.orderKey = failures, &next, nil, nil, nil
	return nil
}

// StoreWindow stores the current certificate c's renewal window (nil: the
// CA has none), its renewal instant, and when to ask the CA again.
func (s *Store) StoreWindow(ctx context.Context, c *Cert, start, end *time.Time, renewAt time.Time, next time.Duration) error {
	err := s.c.Run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE certrenew_certificates
			SET ari_start = $2, ari_end = $3, renew_at = $4, ari_next_check = now() + make_interval(secs => $5)
			WHERE id = $1 AND current`, c.id, start, end, renewAt, next.Seconds())
		return err
	})
	if err != nil {
		return err
	}
	c.RenewAt, c.ARIStart, c.ARIEnd = renewAt, start, end
	c.ARINextCheck = s.c.Clock.Now().Add(next)
	return nil
}
