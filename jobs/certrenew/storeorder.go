package certrenew

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

	"github.com/go-acme/lego/v5/certificate"
	"github.com/jackc/pgx/v5"
)

// The domain store's writes about one domain's order: recorded before the CA
// hears of it, then its certificate made current or its failure backed off.
// Each is fenced (recordURLs aside), and reflected in the domain only once
// committed.

// errBudget: the order budget of the last 3 hours is spent.
var errBudget = errors.New("certrenew: order budget spent")

// beginOrder checks the budget and records the order in flight, in one
// fenced transaction. All fenced transactions of the job hold the same
// fencing row until they commit, so two workers cannot both take the last
// order of the budget. The certificate key (orderKey) is stored, sealed, with
// the order.
func (s *domainStore) beginOrder(ctx context.Context, d *domain, replaces string, log *slog.Logger) (int64, crypto.Signer, error) {
	if s.budget.spent() {
		return 0, nil, errBudget
	}
	key, sealed, err := s.orderKey(d)
	if err != nil {
		return 0, nil, err
	}
	var orderID int64
	var used int
	err = s.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM certrenew_orders WHERE started_at > now() - make_interval(secs => $1)`,
			BudgetWindow.Seconds()).Scan(&used); err != nil {
			return err
		}
		if used >= s.j.opts.OrderBudget {
			return errBudget
		}
		var err error
		orderID, err = s.insertOrder(ctx, tx, d, replaces, sealed)
		return err
	})
	if errors.Is(err, errBudget) {
		first := s.budget.markSpent()
		s.j.m.failures.WithLabelValues(s.r.Job, "budget").Inc()
		if first {
			s.log.WarnContext(ctx, "order budget spent: no more orders until older ones leave the window",
				"budget", s.j.opts.OrderBudget, "window", BudgetWindow, "used", used)
		}
		log.InfoContext(ctx, "due, but the order budget is spent")
		return 0, nil, errBudget
	}
	if err != nil {
		return 0, nil, err
	}
	if d.orderID != nil {
		log.InfoContext(ctx, "resuming an order an earlier term left in flight", "earlier_order_id", *d.orderID,
			"earlier_token", deref(d.orderToken), "order_id", orderID, "replaces", replaces)
	} else {
		log.InfoContext(ctx, "ordering", "order_id", orderID, "replaces", replaces, "renewal", replaces != "")
	}
	d.orderID, d.orderToken, d.orderKey, d.attempt = &orderID, &s.r.Token, sealed, d.attempt+1
	return orderID, key, nil
}

// insertOrder writes, in tx, the order in flight for d (abandoning the one
// an earlier term left) and returns its id.
func (s *domainStore) insertOrder(ctx context.Context, tx pgx.Tx, d *domain, replaces string, sealed []byte) (int64, error) {
	if d.orderID != nil {
		if _, err := tx.Exec(ctx, `UPDATE certrenew_orders SET result = 'abandoned', finished_at = now(),
			error = 'the term that placed it ended before it finished' WHERE id = $1 AND result IS NULL`, *d.orderID); err != nil {
			return 0, err
		}
	}
	var rep *string
	if replaces != "" {
		rep = &replaces
	}
	var orderID int64
	if err := tx.QueryRow(ctx, `INSERT INTO certrenew_orders (domain, token, instance, replaces) VALUES ($1, $2, $3, $4) RETURNING id`,
		d.name, s.r.Token, s.r.Instance, rep).Scan(&orderID); err != nil {
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
		d.name, d.source, orderID, s.r.Token, s.r.Instance, rep, sealed, s.j.keys.KeyID())
	return orderID, err
}

// orderKey is the certificate key of d's next order, and its sealed form:
// the key of the order an earlier term left in flight (re-sealed with the
// sealing key), or else a new one.
func (s *domainStore) orderKey(d *domain) (crypto.Signer, []byte, error) {
	if d.orderKey != nil {
		if k, err := s.openOrderKey(d); err == nil {
			if pt, err := keyPEM(k); err == nil {
				return k, s.j.keys.Seal(pt, aadCert(d.name)), nil // resealed with the current key
			}
		}
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	pt, err := keyPEM(k)
	if err != nil {
		return nil, nil, err
	}
	return k, s.j.keys.Seal(pt, aadCert(d.name)), nil
}

// openOrderKey opens the certificate key sealed with the order d has in
// flight.
func (s *domainStore) openOrderKey(d *domain) (crypto.Signer, error) {
	if d.orderKey == nil {
		return nil, errors.New("no key was recorded with the order")
	}
	pt, err := s.j.keys.Open(d.orderKey, aadCert(d.name))
	if err != nil {
		return nil, err
	}
	return parseKeyPEM(pt)
}

// Bounds of recordURLs: it may take up to recordURLsMax while the term lasts
// (lego is waiting on it, and the pass on lego), and at most
// recordURLsAfterTerm once the term has ended, so as not to hold the
// hand-over.
const (
	recordURLsMax       = 30 * time.Second
	recordURLsAfterTerm = time.Second
)

// recordURLs notes what the CA said about order orderID — its URL, and the
// certificate's once it is valid ("" for not known) — in
// certrenew_order_urls, outside the fence and even after the term ended
// (migrations/0008_certrenew_order_urls.sql). A failure only costs the next
// leader a second order.
func (s *domainStore) recordURLs(ctx context.Context, d *domain, orderID int64, orderURL, certURL string, log *slog.Logger) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordURLsMax)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(recordURLsAfterTerm, cancel) })
	defer stop()
	if _, err := s.j.pool.Exec(wctx, `INSERT INTO certrenew_order_urls (order_id, domain, order_url, cert_url, token, instance)
		VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, ''), $5, $6)
		ON CONFLICT (order_id) DO UPDATE SET order_url = coalesce(EXCLUDED.order_url, certrenew_order_urls.order_url),
			cert_url = coalesce(EXCLUDED.cert_url, certrenew_order_urls.cert_url)`,
		orderID, d.name, orderURL, certURL, s.r.Token, s.r.Instance); err != nil {
		log.WarnContext(ctx, "could not note the CA's URLs of the order (if this term cannot finish it, the next leader orders again)",
			"order_id", orderID, "err", err)
	}
}

// recordedURLs reads what recordURLs noted about order orderID, and the term
// that noted it; pgx.ErrNoRows when nothing was.
func (s *domainStore) recordedURLs(ctx context.Context, orderID int64) (orderURL, certURL *string, token int64, err error) {
	err = s.j.pool.QueryRow(ctx, `SELECT order_url, cert_url, token FROM certrenew_order_urls WHERE order_id = $1`, orderID).
		Scan(&orderURL, &certURL, &token)
	return orderURL, certURL, token, err
}

var errBadCertificate = errors.New("certrenew: the CA's certificate does not match the order")

// storeCert makes the issued certificate the domain's current one and clears
// the order, in one fenced transaction. A certificate that does not match
// the order (errBadCertificate) is refused.
func (s *domainStore) storeCert(ctx context.Context, d *domain, orderID int64, res *certificate.Resource, key crypto.Signer,
	replaces string, conflict bool, log *slog.Logger) error {
	leaf, certID, err := checkIssued(d.name, res.Certificate, key)
	if err != nil {
		return err
	}
	pemKey, err := keyPEM(key)
	if err != nil {
		return err
	}
	renewAt := FallbackRenewAt(leaf.NotBefore, leaf.NotAfter, s.j.opts.RenewFraction, s.j.opts.ShortRenewFraction, s.j.opts.ShortLifetime)
	var rep *string
	if replaces != "" {
		rep = &replaces
	}
	var certRowID int64
	var prevID *int64
	err = s.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		prevID = nil
		err := tx.QueryRow(ctx, `UPDATE certrenew_certificates SET current = false WHERE domain = $1 AND current RETURNING id`, d.name).Scan(&prevID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// The first ARI check is due at once: the next pass asks the CA for
		// the window; until then the fallback instant holds.
		if err := tx.QueryRow(ctx, `INSERT INTO certrenew_certificates (domain, chain_pem, key_sealed, key_id, serial, ari_cert_id,
				not_before, not_after, renew_at, ari_next_check, replaces_id, replaces_sent, ari_conflict, order_id, token, instance)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now(), $10, $11, $12, $13, $14, $15) RETURNING id`,
			d.name, string(res.Certificate), s.j.keys.Seal(pemKey, aadCert(d.name)), s.j.keys.KeyID(),
			hex.EncodeToString(leaf.SerialNumber.Bytes()), certID, leaf.NotBefore, leaf.NotAfter, renewAt,
			prevID, rep, conflict, orderID, s.r.Token, s.r.Instance).Scan(&certRowID); err != nil {
			return err
		}
		return s.closeIssued(ctx, tx, d, orderID, conflict)
	})
	if err != nil {
		return err
	}
	s.j.m.orders.WithLabelValues(s.r.Job, "issued").Inc()
	log.InfoContext(ctx, "certificate stored", "certificate_id", certRowID, "order_id", orderID,
		"not_after", leaf.NotAfter, "renew_at", renewAt, "replaced_id", deref(prevID), "ari_renewal", replaces != "" && !conflict)
	d.cert = &storedCert{id: certRowID, leaf: leaf, notBefore: leaf.NotBefore, notAfter: leaf.NotAfter, renewAt: renewAt,
		ariNextCheck: s.clock.now(), ariCertID: certID, token: s.r.Token}
	d.orderID, d.orderToken, d.orderKey, d.failures, d.nextAttempt, d.attempt = nil, nil, nil, 0, nil, 0
	return nil
}

// closeIssued marks order orderID issued and clears, in tx, d's order in
// flight and its back-off.
func (s *domainStore) closeIssued(ctx context.Context, tx pgx.Tx, d *domain, orderID int64, conflict bool) error {
	if _, err := tx.Exec(ctx, `UPDATE certrenew_domains SET order_id = NULL, order_token = NULL, order_instance = NULL,
			order_started_at = NULL, order_replaces = NULL, order_key_sealed = NULL, order_key_id = NULL,
			attempt = 0, failures = 0, next_attempt_at = NULL, last_error = NULL, last_error_reason = NULL,
			last_error_at = NULL, token = $2, updated_at = now()
		WHERE domain = $1`, d.name, s.r.Token); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE certrenew_orders SET result = 'issued', finished_at = now(), ari_conflict = $2 WHERE id = $1`,
		orderID, conflict)
	return err
}

// checkIssued checks that chain is a certificate for name with key's public
// key and sane dates, and returns its leaf and ARI identifier; otherwise an
// errBadCertificate.
func checkIssued(name string, chain []byte, key crypto.Signer) (*x509.Certificate, string, error) {
	leaf, err := parseLeaf(chain)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", errBadCertificate, err)
	}
	if !slices.Contains(leaf.DNSNames, name) {
		return nil, "", fmt.Errorf("%w: issued for %v, not %s", errBadCertificate, leaf.DNSNames, name)
	}
	if !publicKeyEqual(leaf.PublicKey, key.Public()) {
		return nil, "", fmt.Errorf("%w: its public key is not the order's", errBadCertificate)
	}
	if !leaf.NotBefore.Before(leaf.NotAfter) {
		return nil, "", fmt.Errorf("%w: not-before %v is not before not-after %v", errBadCertificate, leaf.NotBefore, leaf.NotAfter)
	}
	certID, err := ariCertID(leaf)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", errBadCertificate, err)
	}
	return leaf, certID, nil
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(equaler)
	return ok && ea.Equal(b)
}

// recordFailure records that order orderID of d failed with f, its
// failures-th failure in a row: no order in flight any more, and none before
// wait has passed.
func (s *domainStore) recordFailure(ctx context.Context, d *domain, orderID int64, f failure, failures int, wait time.Duration) error {
	msg := f.err.Error()
	if len(msg) > 2000 {
		msg = msg[:2000] + "…"
	}
	err := s.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE certrenew_domains SET order_id = NULL, order_token = NULL, order_instance = NULL,
				order_started_at = NULL, order_replaces = NULL, order_key_sealed = NULL, order_key_id = NULL,
				failures = $2, next_attempt_at = now() + make_interval(secs => $3), last_error = $4,
				last_error_reason = $5, last_error_at = now(), token = $6, updated_at = now()
			WHERE domain = $1`, d.name, failures, wait.Seconds(), msg, f.reason, s.r.Token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE certrenew_orders SET result = 'failed', finished_at = now(), reason = $2, error = $3 WHERE id = $1`,
			orderID, f.reason, msg)
		return err
	})
	if err != nil {
		return err
	}
	next := s.clock.now().Add(wait)
	d.failures, d.nextAttempt, d.orderID, d.orderToken, d.orderKey = failures, &next, nil, nil, nil
	return nil
}

// storeWindow stores the current certificate c's renewal window (nil: the
// CA has none), its renewal instant, and when to ask the CA again.
func (s *domainStore) storeWindow(ctx context.Context, c *storedCert, start, end *time.Time, renewAt time.Time, next time.Duration) error {
	err := s.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE certrenew_certificates
			SET ari_start = $2, ari_end = $3, renew_at = $4, ari_next_check = now() + make_interval(secs => $5)
			WHERE id = $1 AND current`, c.id, start, end, renewAt, next.Seconds())
		return err
	})
	if err != nil {
		return err
	}
	c.renewAt, c.ariStart, c.ariEnd = renewAt, start, end
	c.ariNextCheck = s.clock.now().Add(next)
	return nil
}
