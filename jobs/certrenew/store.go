package certrenew

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/scheduler"
)

// domainStore is what PostgreSQL holds about each wanted domain: its name,
// its order in flight, its back-off and its current certificate. It
// guarantees that the domains are read on the database's clock, which it
// starts (clock); that names that cannot get a certificate are recorded with
// their reason; that an order is recorded, within the budget, before the CA
// hears of it; and that every write it makes for a domain is fenced by the
// run's token and reflected in the in-memory domain only once committed —
// except the CA's URLs of an order (recordURLs), noted even after the term
// ended because they only say where to look.
type domainStore struct {
	j     *job // the pool, keyring, options and metrics; the fingerprint of what was loaded
	r     *scheduler.Run
	log   *slog.Logger
	clock *dbClock

	budget budgetLatch // found spent: no more orders this pass
}

// snapshot is what a pass starts from.
type snapshot struct {
	domains     []*domain       // the wanted names that can get a certificate
	invalid     []invalidDomain // wanted names that cannot get a certificate
	pausedUntil time.Time       // our clock: the pause an earlier pass recorded; zero: none
	pauseReason string
}

// load reads the wanted domains, their state and current certificates, the
// pause, and the database's clock.
func (s *domainStore) load(ctx context.Context) (_ *snapshot, err error) {
	db := s.j.pool
	var dbNow time.Time
	var pausedFor float64
	var pauseReason *string
	if err := db.QueryRow(ctx, `SELECT now(),
			coalesce((SELECT extract(epoch FROM paused_until - now())::float8 FROM certrenew_job WHERE job = $1), 0),
			(SELECT pause_reason FROM certrenew_job WHERE job = $1)`, s.r.Job).
		Scan(&dbNow, &pausedFor, &pauseReason); err != nil {
		return nil, err
	}
	s.clock.set(dbNow)
	snap := &snapshot{}
	if pausedFor > 0 {
		snap.pausedUntil = s.clock.loaded.Add(time.Duration(pausedFor * float64(time.Second)))
		if pauseReason != nil {
			snap.pauseReason = *pauseReason
		}
	}

	// Taken before the rows are read: a row committed in between makes the
	// next look differ (one more pass), never the reverse (a row missed).
	// The requests' part is left empty: the pass handles (deletes) every
	// request it reads, so a request still there at the next look is one it
	// did not see.
	domainsFP, _, err := s.j.fingerprint(ctx, db)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			fp := domainsFP + "/"
			s.j.seen.Store(&fp)
		}
	}()
	if snap.domains, snap.invalid, err = s.wanted(ctx); err != nil {
		return nil, err
	}
	if err := s.loadStates(ctx, snap.domains); err != nil {
		return nil, err
	}
	return snap, nil
}

// wanted reads the wanted custom domains and turns each into its
// certificate's name (in order), or an invalid domain; rows that share a
// name share one domain.
func (s *domainStore) wanted(ctx context.Context) ([]*domain, []invalidDomain, error) {
	rows, err := s.j.pool.Query(ctx, `SELECT domain, added_at FROM custom_domains WHERE status = ANY($1) ORDER BY domain`, s.j.opts.Statuses)
	if err != nil {
		return nil, nil, err
	}
	type src struct {
		raw     string
		addedAt time.Time
	}
	srcs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (src, error) {
		var s src
		return s, r.Scan(&s.raw, &s.addedAt)
	})
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]*domain{}
	var domains []*domain
	var invalid []invalidDomain
	for _, row := range srcs {
		name, err := s.j.opts.certName(row.raw)
		if err != nil {
			var ie *InvalidNameError
			errors.As(err, &ie)
			invalid = append(invalid, invalidDomain{domain: row.raw, err: ie})
			continue
		}
		if d, dup := byName[name]; dup {
			if row.addedAt.Before(d.addedAt) {
				d.addedAt = row.addedAt
			}
			continue // the same certificate serves both rows
		}
		d := &domain{name: name, source: row.raw, addedAt: row.addedAt}
		byName[name] = d
		domains = append(domains, d)
	}
	return domains, invalid, nil
}

// loadStates reads each domain's order state and current certificate.
func (s *domainStore) loadStates(ctx context.Context, domains []*domain) error {
	byName := make(map[string]*domain, len(domains))
	names := make([]string, len(domains))
	for i, d := range domains {
		byName[d.name], names[i] = d, d.name
	}
	rows, err := s.j.pool.Query(ctx, `SELECT n.name,
			s.order_id, s.order_token, s.order_started_at, s.order_key_sealed,
			coalesce(s.attempt, 0), coalesce(s.failures, 0), s.next_attempt_at, s.last_error,
			c.id, c.chain_pem, c.renew_at, c.ari_start, c.ari_end, c.ari_next_check, c.ari_cert_id, c.token
		FROM unnest($1::text[]) AS n(name)
		LEFT JOIN certrenew_domains s ON s.domain = n.name
		LEFT JOIN certrenew_certificates c ON c.domain = n.name AND c.current`, names)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var certID, certToken *int64
		var chain, ariCertID *string
		var renewAt, ariNext *time.Time
		c := &storedCert{}
		var d domain
		if err := rows.Scan(&name, &d.orderID, &d.orderToken, &d.orderStarted, &d.orderKey,
			&d.attempt, &d.failures, &d.nextAttempt, &d.lastError,
			&certID, &chain, &renewAt, &c.ariStart, &c.ariEnd, &ariNext, &ariCertID, &certToken); err != nil {
			return err
		}
		t := byName[name]
		t.orderID, t.orderToken, t.orderStarted, t.orderKey = d.orderID, d.orderToken, d.orderStarted, d.orderKey
		t.attempt, t.failures, t.nextAttempt, t.lastError = d.attempt, d.failures, d.nextAttempt, d.lastError
		if certID == nil {
			continue
		}
		leaf, err := parseLeaf([]byte(*chain))
		if err != nil {
			s.log.ErrorContext(ctx, "stored certificate cannot be parsed; ordering a new one", "domain", name, "certificate_id", *certID, "err", err)
			continue
		}
		c.id, c.leaf, c.notBefore, c.notAfter = *certID, leaf, leaf.NotBefore, leaf.NotAfter
		c.renewAt, c.ariNextCheck, c.ariCertID, c.token = *renewAt, *ariNext, *ariCertID, *certToken
		t.cert = c
	}
	return rows.Err()
}

// invalidReason is why a recorded domain cannot get a certificate.
type invalidReason struct{ code, reason string }

// storedInvalid reads the invalid domains recorded so far.
func (s *domainStore) storedInvalid(ctx context.Context) (map[string]invalidReason, error) {
	rows, err := s.j.pool.Query(ctx, `SELECT domain, code, reason FROM certrenew_invalid_domains`)
	if err != nil {
		return nil, err
	}
	stored := map[string]invalidReason{}
	var dom string
	var k invalidReason
	if _, err := pgx.ForEachRow(rows, []any{&dom, &k.code, &k.reason}, func() error {
		stored[dom] = k
		return nil
	}); err != nil {
		return nil, err
	}
	return stored, nil
}

// recordInvalid writes which wanted domains cannot get a certificate, and
// forgets those that were fixed or are no longer wanted. A domain is logged
// when it is first found invalid, not on every pass.
func (s *domainStore) recordInvalid(ctx context.Context, invalid []invalidDomain) error {
	stored, err := s.storedInvalid(ctx)
	if err != nil {
		return err
	}
	var changed []invalidDomain
	keep := make([]string, 0, len(invalid))
	for _, iv := range invalid {
		keep = append(keep, iv.domain)
		if was, ok := stored[iv.domain]; !ok || was.code != iv.err.Code || was.reason != iv.err.Reason {
			changed = append(changed, iv)
		}
	}
	gone := 0
	for d := range stored {
		if !slices.Contains(keep, d) {
			gone++
		}
	}
	if len(changed) == 0 && gone == 0 {
		return nil
	}
	err = s.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		for _, iv := range changed {
			if _, err := tx.Exec(ctx, `INSERT INTO certrenew_invalid_domains (domain, code, reason, token) VALUES ($1, $2, $3, $4)
				ON CONFLICT (domain) DO UPDATE SET code = EXCLUDED.code, reason = EXCLUDED.reason,
					last_seen = now(), token = EXCLUDED.token`,
				iv.domain, iv.err.Code, iv.err.Reason, s.r.Token); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `DELETE FROM certrenew_invalid_domains WHERE NOT (domain = ANY($1))`, keep)
		return err
	})
	if err != nil {
		return err
	}
	for _, iv := range changed {
		s.log.WarnContext(ctx, "custom domain cannot get a certificate", "domain", iv.domain, "code", iv.err.Code, "reason", iv.err.Reason)
	}
	return nil
}
