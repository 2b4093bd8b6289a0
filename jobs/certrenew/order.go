package certrenew

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/go-acme/lego/v5/acme"
	"github.com/go-acme/lego/v5/acme/api"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/jackc/pgx/v5"
)

// errBudget: the order budget of the last 3 hours is spent.
var errBudget = errors.New("certrenew: order budget spent")

// defaultRateLimitWait applies to a rate limit that came without Retry-After.
const defaultRateLimitWait = time.Hour

// do works on one domain: refreshes its ARI window when due, and orders a
// certificate when it has none or its renewal instant has come. It returns
// the domain's state afterwards.
func (p *pass) do(ctx context.Context, ca *caSession, d *domain) string {
	log := p.log.With("domain", d.name)
	if d.cert != nil && !p.clock.now().Before(d.cert.ariNextCheck) {
		if w, _ := p.throttle.left(); w == 0 {
			p.checkARI(ctx, ca, d, log)
		}
	}
	if d.cert != nil && p.clock.now().Before(d.cert.renewAt) {
		return d.state(p.clock.now())
	}
	switch {
	case ctx.Err() != nil:
		return d.state(p.clock.now())
	case d.nextAttempt != nil && p.clock.now().Before(*d.nextAttempt):
		log.DebugContext(ctx, "due, but waiting before the next attempt", "next_attempt", *d.nextAttempt, "failures", d.failures)
		return d.state(p.clock.now())
	}
	if w, reason := p.throttle.left(); w > 0 {
		log.DebugContext(ctx, "due, but the renewer is paused", "reason", reason)
		return d.state(p.clock.now())
	}
	// The CA may have the order an earlier term left in flight. Finishing
	// it (answering its challenges, finalizing it, fetching and storing its
	// certificate) orders nothing new, and the CA moves an order through
	// its states once, so it need not wait for the lock-delay. It is tried
	// again after the lock-delay: an earlier term that was paused, not dead,
	// may have noted where the CA has its order meanwhile.
	recovered := func() bool { return d.orderID != nil && p.finishUnfinished(ctx, ca, d, replacesOf(d), log) }
	if recovered() {
		return d.state(p.clock.now())
	}
	delayed, err := p.gate.beforeOrder(ctx)
	if err != nil || delayed && recovered() {
		return d.state(p.clock.now())
	}
	p.order(ctx, ca, d, log)
	return d.state(p.clock.now())
}

// checkARI asks the CA for the certificate's renewal window (RFC 9773) and,
// when the window is new, picks the renewal instant inside it.
func (p *pass) checkARI(ctx context.Context, ca *caSession, d *domain, log *slog.Logger) {
	c := d.cert
	octx, obs := observe(ctx, nil)
	info, err := ca.renewalInfo(octx, c.leaf)
	if ctx.Err() != nil {
		return
	}
	var next time.Duration
	renewAt, start, end := c.renewAt, c.ariStart, c.ariEnd
	switch {
	case errors.Is(err, api.ErrNoARI):
		next = ariDefault
		start, end = nil, nil
		renewAt = FallbackRenewAt(c.notBefore, c.notAfter, p.opts.RenewFraction, p.opts.ShortRenewFraction, p.opts.ShortLifetime)
	case err != nil:
		f := classify(err, obs)
		p.j.m.failures.WithLabelValues(p.r.Job, ReasonARI).Inc()
		log.WarnContext(ctx, "renewal info (ARI) check failed; keeping the current renewal instant", "reason", f.reason, "err", err)
		p.throttle.failed(ctx, f, d.name)
		next = ariAfterFailure
	default:
		ws, we := info.SuggestedWindow.Start, info.SuggestedWindow.End
		if start == nil || end == nil || !start.Equal(ws) || !end.Equal(we) {
			renewAt = pickInWindow(ws, we, lastSafeRenewal(c.notBefore, c.notAfter))
			log.InfoContext(ctx, "renewal window from the CA", "window_start", ws, "window_end", we, "renew_at", renewAt)
		}
		start, end = &ws, &we
		next = ariRecheck(info.RetryAfter)
	}
	err = p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE certrenew_certificates
			SET ari_start = $2, ari_end = $3, renew_at = $4, ari_next_check = now() + make_interval(secs => $5)
			WHERE id = $1 AND current`, c.id, start, end, renewAt, next.Seconds())
		return err
	})
	if err != nil {
		p.stop.checkStale(err)
		log.WarnContext(ctx, "could not store the renewal window", "err", err)
		return
	}
	c.renewAt, c.ariStart, c.ariEnd = renewAt, start, end
	c.ariNextCheck = p.clock.now().Add(next)
}

// order asks the CA for a certificate for d: the order is recorded in flight
// (fenced) before the first request, so that a successor finds it; then the
// result is stored or the failure recorded, both fenced.
func (p *pass) order(ctx context.Context, ca *caSession, d *domain, log *slog.Logger) {
	replaces := replacesOf(d)
	orderID, key, err := p.beginOrder(ctx, d, replaces, log)
	switch {
	case errors.Is(err, errBudget):
		return
	case err != nil:
		p.stop.checkStale(err)
		if ctx.Err() == nil {
			log.ErrorContext(ctx, "could not record the order; not ordering", "err", err)
		}
		return
	}

	// What the CA says about the order (its URL; the certificate's once
	// valid) is noted at once, outside the fence: if this term cannot store
	// the certificate (its term over mid-order, its store refused, its
	// process gone), the next one fetches it instead of ordering again.
	octx, obs := observe(ctx, func(orderURL, certURL string) { p.recordURLs(ctx, d, orderID, orderURL, certURL, log) })
	res, err := ca.obtain(octx, certificate.ObtainRequest{
		Domains:        []string{d.name},
		PrivateKey:     key,
		Bundle:         true,
		Profile:        p.opts.Profile,
		ReplacesCertID: replaces,
	})
	if ctx.Err() != nil {
		// The term (or the pass) ended: whatever happened at the CA, this
		// term cannot store it. The order stays in flight for the
		// successor, which resumes it after the lock-delay (and fetches
		// the certificate when it was issued).
		orderURL, certURL := obs.urls()
		log.InfoContext(ctx, "order interrupted; left in flight for the next leader", "order_id", orderID,
			"order_url", orderURL, "issued", certURL != "", "cause", context.Cause(ctx))
		return
	}
	conflicts, _, _, _ := obs.snapshot()
	if conflicts > 0 {
		p.j.m.alreadyReplaced.WithLabelValues(p.r.Job).Add(float64(conflicts))
		log.WarnContext(ctx, "the CA answered 409 alreadyReplaced: lego ordered again without \"replaces\" (not an ARI renewal)",
			"replaces", replaces, "order_id", orderID)
	}
	if err == nil && res == nil {
		err = errors.New("lego returned no certificate and no error")
	}
	if err != nil && obs.finalizedOrder() {
		// The CA accepted the CSR before lego's call failed (a download
		// refused, say): the certificate is issued or will be. Fetch it
		// rather than fail the order and, later, order a second one.
		log.WarnContext(ctx, "ordering failed after the CA accepted the CSR; fetching the certificate it issued",
			"order_id", orderID, "err", err)
		if p.finishUnfinished(ctx, ca, d, replaces, log) {
			return
		}
	}
	if err != nil {
		p.orderFailed(ctx, d, orderID, classify(err, obs), log)
		return
	}
	if err := p.storeCert(ctx, d, orderID, res, key, replaces, conflicts > 0, log); err != nil {
		p.stop.checkStale(err)
		if errors.Is(err, errBadCertificate) {
			p.orderFailed(ctx, d, orderID, failure{reason: ReasonCertificate, counts: true, err: err}, log)
			return
		}
		log.ErrorContext(ctx, "could not store the certificate", "order_id", orderID, "err", err)
	}
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
func (p *pass) recordURLs(ctx context.Context, d *domain, orderID int64, orderURL, certURL string, log *slog.Logger) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordURLsMax)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(recordURLsAfterTerm, cancel) })
	defer stop()
	if _, err := p.j.pool.Exec(wctx, `INSERT INTO certrenew_order_urls (order_id, domain, order_url, cert_url, token, instance)
		VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, ''), $5, $6)
		ON CONFLICT (order_id) DO UPDATE SET order_url = coalesce(EXCLUDED.order_url, certrenew_order_urls.order_url),
			cert_url = coalesce(EXCLUDED.cert_url, certrenew_order_urls.cert_url)`,
		orderID, d.name, orderURL, certURL, p.r.Token, p.r.Instance); err != nil {
		log.WarnContext(ctx, "could not note the CA's URLs of the order (if this term cannot finish it, the next leader orders again)",
			"order_id", orderID, "err", err)
	}
}

// finishUnfinished finishes the unfinished order d has in flight
// (d.orderID) at the CA: one an earlier term left, or this term's whose lego
// call failed after the CA accepted the CSR. It takes the certificate's URL
// the transport noted, or asks the CA about the order at the URL it noted —
// answering its challenges if it is pending, finalizing it if it is ready —
// then fetches the certificate and stores it. It reports whether the domain
// is dealt with for this pass (stored, this term's store refused, or the
// order's failure recorded); false means: order as usual.
func (p *pass) finishUnfinished(ctx context.Context, ca *caSession, d *domain, replaces string, log *slog.Logger) bool {
	orderID := *d.orderID
	var orderURL, certURL *string
	var token int64
	err := p.j.pool.QueryRow(ctx, `SELECT order_url, cert_url, token FROM certrenew_order_urls WHERE order_id = $1`, orderID).
		Scan(&orderURL, &certURL, &token)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false
	case err != nil:
		if ctx.Err() == nil {
			log.WarnContext(ctx, "could not look up the CA's URLs of an unfinished order (it will be ordered again)", "unfinished_order_id", orderID, "err", err)
		}
		return ctx.Err() != nil
	}
	log = log.With("unfinished_order_id", orderID, "unfinished_order_token", token)
	var url string
	if certURL != nil {
		url = *certURL
	}
	if url == "" && orderURL == nil {
		return false
	}
	key, err := p.j.openOrderKey(d)
	if err != nil {
		log.WarnContext(ctx, "the unfinished order's key does not open (it will be ordered again)", "err", err)
		return false
	}
	if url == "" {
		o, err := ca.askOrder(ctx, *orderURL)
		if err == nil && o.Status == acme.StatusPending {
			// Not validated yet: answer its challenges. The order exists
			// already, so this orders nothing and needs no lock-delay: if
			// the term that placed it is only paused, its own challenge
			// or finalize reaches a CA that has moved on, and is refused.
			log.InfoContext(ctx, "resuming an unfinished order: answering its challenges", "order_url", *orderURL)
			octx, obs := observe(ctx, nil)
			if err := ca.solvePending(octx, o); err != nil {
				if ctx.Err() != nil {
					return true
				}
				p.orderFailed(ctx, d, orderID, classify(err, obs), log)
				return true
			}
			o, err = ca.askOrder(ctx, *orderURL)
		}
		if err == nil && o.Status == acme.StatusReady {
			// Validated, never finalized: finish it with the order's own
			// key. The CA finalizes an order once, so this can never
			// make a second certificate, even if the term that ordered
			// it is paused on its way to finalize: its finalize is then
			// refused. That is why it needs no lock-delay either.
			log.InfoContext(ctx, "finalizing an unfinished order the CA had validated", "order_url", *orderURL)
			o, err = ca.finalizeReady(ctx, d.name, *orderURL, o.Finalize, key)
		}
		switch {
		case err != nil:
			if ctx.Err() == nil {
				log.WarnContext(ctx, "could not finish an unfinished order (it will be ordered again)", "order_url", *orderURL, "err", err)
			}
			return ctx.Err() != nil
		case o.Certificate == "":
			log.InfoContext(ctx, "the CA has not issued an unfinished order (it will be ordered again)", "order_url", *orderURL, "status", o.Status)
			return false
		}
		url = o.Certificate
	}
	res, err := ca.certificate(ctx, url)
	if err != nil {
		if ctx.Err() == nil {
			log.WarnContext(ctx, "could not fetch the certificate issued to an unfinished order (it will be ordered again)", "url", url, "err", err)
		}
		return ctx.Err() != nil
	}
	if err := p.storeCert(ctx, d, orderID, res, key, replaces, false, log); err != nil {
		p.stop.checkStale(err)
		if errors.Is(err, errBadCertificate) {
			log.WarnContext(ctx, "the certificate issued to an unfinished order does not match it (it will be ordered again)", "url", url, "err", err)
			return false
		}
		log.ErrorContext(ctx, "could not store the certificate issued to an unfinished order", "err", err)
		return true
	}
	p.j.m.recovered.WithLabelValues(p.r.Job).Inc()
	log.InfoContext(ctx, "stored the certificate the CA issued to an unfinished order, without ordering again")
	return true
}

// beginOrder checks the budget and records the order in flight, in one
// fenced transaction. All fenced transactions of the job hold the same
// fencing row until they commit, so two workers cannot both take the last
// order of the budget. The certificate key is generated here and stored
// (sealed) with the order, or reused from an order an earlier term left in
// flight.
func (p *pass) beginOrder(ctx context.Context, d *domain, replaces string, log *slog.Logger) (int64, crypto.Signer, error) {
	if p.budget.spent() {
		return 0, nil, errBudget
	}
	var key crypto.Signer
	var sealed []byte
	if d.orderKey != nil {
		if k, err := p.j.openOrderKey(d); err == nil {
			if pt, err := keyPEM(k); err == nil {
				key, sealed = k, p.j.keys.Seal(pt, aadCert(d.name)) // resealed with the current key
			}
		}
	}
	if key == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return 0, nil, err
		}
		pt, err := keyPEM(k)
		if err != nil {
			return 0, nil, err
		}
		key, sealed = k, p.j.keys.Seal(pt, aadCert(d.name))
	}
	var orderID int64
	var used int
	err := p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM certrenew_orders WHERE started_at > now() - make_interval(secs => $1)`,
			BudgetWindow.Seconds()).Scan(&used); err != nil {
			return err
		}
		if used >= p.opts.OrderBudget {
			return errBudget
		}
		if d.orderID != nil {
			if _, err := tx.Exec(ctx, `UPDATE certrenew_orders SET result = 'abandoned', finished_at = now(),
				error = 'the term that placed it ended before it finished' WHERE id = $1 AND result IS NULL`, *d.orderID); err != nil {
				return err
			}
		}
		var rep *string
		if replaces != "" {
			rep = &replaces
		}
		if err := tx.QueryRow(ctx, `INSERT INTO certrenew_orders (domain, token, instance, replaces) VALUES ($1, $2, $3, $4) RETURNING id`,
			d.name, p.r.Token, p.r.Instance, rep).Scan(&orderID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO certrenew_domains AS s (domain, source, order_id, order_token, order_instance, order_started_at,
				order_replaces, order_key_sealed, order_key_id, attempt, token)
			VALUES ($1, $2, $3, $4, $5, now(), $6, $7, $8, 1, $4)
			ON CONFLICT (domain) DO UPDATE SET source = EXCLUDED.source, order_id = EXCLUDED.order_id,
				order_token = EXCLUDED.order_token, order_instance = EXCLUDED.order_instance,
				order_started_at = EXCLUDED.order_started_at, order_replaces = EXCLUDED.order_replaces,
				order_key_sealed = EXCLUDED.order_key_sealed, order_key_id = EXCLUDED.order_key_id,
				attempt = s.attempt + 1, token = EXCLUDED.token, updated_at = now()`,
			d.name, d.source, orderID, p.r.Token, p.r.Instance, rep, sealed, p.j.keys.KeyID())
		return err
	})
	if errors.Is(err, errBudget) {
		first := p.budget.markSpent()
		p.j.m.failures.WithLabelValues(p.r.Job, "budget").Inc()
		if first {
			p.log.WarnContext(ctx, "order budget spent: no more orders until older ones leave the window",
				"budget", p.opts.OrderBudget, "window", BudgetWindow, "used", used)
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
	d.orderID, d.orderToken, d.orderKey, d.attempt = &orderID, &p.r.Token, sealed, d.attempt+1
	return orderID, key, nil
}

// openOrderKey opens the certificate key sealed with the order d has in
// flight.
func (j *job) openOrderKey(d *domain) (crypto.Signer, error) {
	if d.orderKey == nil {
		return nil, errors.New("no key was recorded with the order")
	}
	pt, err := j.keys.Open(d.orderKey, aadCert(d.name))
	if err != nil {
		return nil, err
	}
	return parseKeyPEM(pt)
}

var errBadCertificate = errors.New("certrenew: the CA's certificate does not match the order")

// storeCert makes the issued certificate the domain's current one and clears
// the order, in one fenced transaction.
func (p *pass) storeCert(ctx context.Context, d *domain, orderID int64, res *certificate.Resource, key crypto.Signer,
	replaces string, conflict bool, log *slog.Logger) error {
	leaf, err := parseLeaf(res.Certificate)
	if err != nil {
		return fmt.Errorf("%w: %w", errBadCertificate, err)
	}
	if !slices.Contains(leaf.DNSNames, d.name) {
		return fmt.Errorf("%w: issued for %v, not %s", errBadCertificate, leaf.DNSNames, d.name)
	}
	if !publicKeyEqual(leaf.PublicKey, key.Public()) {
		return fmt.Errorf("%w: its public key is not the order's", errBadCertificate)
	}
	if !leaf.NotBefore.Before(leaf.NotAfter) {
		return fmt.Errorf("%w: not-before %v is not before not-after %v", errBadCertificate, leaf.NotBefore, leaf.NotAfter)
	}
	certID, err := ariCertID(leaf)
	if err != nil {
		return fmt.Errorf("%w: %w", errBadCertificate, err)
	}
	pemKey, err := keyPEM(key)
	if err != nil {
		return err
	}
	renewAt := FallbackRenewAt(leaf.NotBefore, leaf.NotAfter, p.opts.RenewFraction, p.opts.ShortRenewFraction, p.opts.ShortLifetime)
	var rep *string
	if replaces != "" {
		rep = &replaces
	}
	var certRowID int64
	var prevID *int64
	err = p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
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
			d.name, string(res.Certificate), p.j.keys.Seal(pemKey, aadCert(d.name)), p.j.keys.KeyID(),
			hex.EncodeToString(leaf.SerialNumber.Bytes()), certID, leaf.NotBefore, leaf.NotAfter, renewAt,
			prevID, rep, conflict, orderID, p.r.Token, p.r.Instance).Scan(&certRowID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE certrenew_domains SET order_id = NULL, order_token = NULL, order_instance = NULL,
				order_started_at = NULL, order_replaces = NULL, order_key_sealed = NULL, order_key_id = NULL,
				attempt = 0, failures = 0, next_attempt_at = NULL, last_error = NULL, last_error_reason = NULL,
				last_error_at = NULL, token = $2, updated_at = now()
			WHERE domain = $1`, d.name, p.r.Token); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE certrenew_orders SET result = 'issued', finished_at = now(), ari_conflict = $2 WHERE id = $1`,
			orderID, conflict)
		return err
	})
	if err != nil {
		return err
	}
	p.j.m.orders.WithLabelValues(p.r.Job, "issued").Inc()
	log.InfoContext(ctx, "certificate stored", "certificate_id", certRowID, "order_id", orderID,
		"not_after", leaf.NotAfter, "renew_at", renewAt, "replaced_id", deref(prevID), "ari_renewal", replaces != "" && !conflict)
	d.cert = &storedCert{id: certRowID, leaf: leaf, notBefore: leaf.NotBefore, notAfter: leaf.NotAfter, renewAt: renewAt,
		ariNextCheck: p.clock.now(), ariCertID: certID, token: p.r.Token}
	d.orderID, d.orderToken, d.orderKey, d.failures, d.nextAttempt, d.attempt = nil, nil, nil, 0, nil, 0
	return nil
}

// orderFailed records a failed order: the domain backs off (or waits for
// the CA's Retry-After), and a 503 pauses the whole renewer.
func (p *pass) orderFailed(ctx context.Context, d *domain, orderID int64, f failure, log *slog.Logger) {
	p.j.m.orders.WithLabelValues(p.r.Job, "failed").Inc()
	p.j.m.failures.WithLabelValues(p.r.Job, f.reason).Inc()
	failures := d.failures
	if f.counts {
		failures++
	}
	wait := Backoff(failures)
	if f.reason == ReasonRateLimited || f.pause {
		wait = max(f.retryAfter, wait)
		if wait == 0 {
			wait = defaultRateLimitWait
			if f.pause {
				wait = p.opts.UnavailablePause
			}
		}
	}
	p.throttle.failed(ctx, f, d.name)
	msg := f.err.Error()
	if len(msg) > 2000 {
		msg = msg[:2000] + "…"
	}
	err := p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE certrenew_domains SET order_id = NULL, order_token = NULL, order_instance = NULL,
				order_started_at = NULL, order_replaces = NULL, order_key_sealed = NULL, order_key_id = NULL,
				failures = $2, next_attempt_at = now() + make_interval(secs => $3), last_error = $4,
				last_error_reason = $5, last_error_at = now(), token = $6, updated_at = now()
			WHERE domain = $1`, d.name, failures, wait.Seconds(), msg, f.reason, p.r.Token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE certrenew_orders SET result = 'failed', finished_at = now(), reason = $2, error = $3 WHERE id = $1`,
			orderID, f.reason, msg)
		return err
	})
	if err != nil {
		p.stop.checkStale(err)
		log.ErrorContext(ctx, "could not record the failed order", "err", err)
		return
	}
	next := p.clock.now().Add(wait)
	d.failures, d.nextAttempt, d.orderID, d.orderToken, d.orderKey = failures, &next, nil, nil, nil
	log.WarnContext(ctx, "order failed", "order_id", orderID, "reason", f.reason, "failures", failures,
		"next_attempt_in", wait.Round(time.Second), "err", f.err)
}

func publicKeyEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(equaler)
	return ok && ea.Equal(b)
}
