package certrenew

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// load reads the wanted domains, their state and current certificates, the
// pause, and the database's clock.
func (p *pass) load(ctx context.Context) (err error) {
	db := p.j.pool
	var dbNow time.Time
	var pausedFor float64
	var pauseReason *string
	if err := db.QueryRow(ctx, `SELECT now(),
			coalesce((SELECT extract(epoch FROM paused_until - now())::float8 FROM certrenew_job WHERE job = $1), 0),
			(SELECT pause_reason FROM certrenew_job WHERE job = $1)`, p.r.Job).
		Scan(&dbNow, &pausedFor, &pauseReason); err != nil {
		return err
	}
	p.clock.set(dbNow)
	if pausedFor > 0 {
		reason := ""
		if pauseReason != nil {
			reason = *pauseReason
		}
		p.throttle.restore(p.clock.loaded.Add(time.Duration(pausedFor*float64(time.Second))), reason)
	}

	// Taken before the rows are read: a row committed in between makes the
	// next look differ (one more pass), never the reverse (a row missed).
	// The requests' part is left empty: the pass handles (deletes) every
	// request it reads, so a request still there at the next look is one it
	// did not see.
	domainsFP, _, err := p.j.fingerprint(ctx, db)
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			fp := domainsFP + "/"
			p.j.seen.Store(&fp)
		}
	}()
	byName, names, err := p.wanted(ctx)
	if err != nil {
		return err
	}
	if err := p.loadStates(ctx, byName, names); err != nil {
		return err
	}
	for _, n := range names {
		p.domains = append(p.domains, byName[n])
	}
	return nil
}

// wanted reads the wanted custom domains and turns each into its
// certificate's name (in order); invalid names go to p.invalid, and rows that
// share a name share one domain.
func (p *pass) wanted(ctx context.Context) (map[string]*domain, []string, error) {
	rows, err := p.j.pool.Query(ctx, `SELECT domain, added_at FROM custom_domains WHERE status = ANY($1) ORDER BY domain`, p.opts.Statuses)
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
	var names []string
	for _, s := range srcs {
		name, err := p.opts.certName(s.raw)
		if err != nil {
			var ie *InvalidNameError
			errors.As(err, &ie)
			p.invalid = append(p.invalid, invalidDomain{domain: s.raw, err: ie})
			continue
		}
		if d, dup := byName[name]; dup {
			if s.addedAt.Before(d.addedAt) {
				d.addedAt = s.addedAt
			}
			continue // the same certificate serves both rows
		}
		byName[name] = &domain{name: name, source: s.raw, addedAt: s.addedAt}
		names = append(names, name)
	}
	return byName, names, nil
}

// loadStates reads each name's order state and current certificate into
// byName.
func (p *pass) loadStates(ctx context.Context, byName map[string]*domain, names []string) error {
	rows, err := p.j.pool.Query(ctx, `SELECT n.name,
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
			p.log.ErrorContext(ctx, "stored certificate cannot be parsed; ordering a new one", "domain", name, "certificate_id", *certID, "err", err)
			continue
		}
		c.id, c.leaf, c.notBefore, c.notAfter = *certID, leaf, leaf.NotBefore, leaf.NotAfter
		c.renewAt, c.ariNextCheck, c.ariCertID, c.token = *renewAt, *ariNext, *ariCertID, *certToken
		t.cert = c
	}
	return rows.Err()
}

// recordInvalid writes which wanted domains cannot get a certificate, and
// forgets those that were fixed or are no longer wanted. A domain is logged
// when it is first found invalid, not on every pass.
func (p *pass) recordInvalid(ctx context.Context) error {
	rows, err := p.j.pool.Query(ctx, `SELECT domain, code, reason FROM certrenew_invalid_domains`)
	if err != nil {
		return err
	}
	type known struct{ code, reason string }
	stored := map[string]known{}
	var dom string
	var k known
	if _, err := pgx.ForEachRow(rows, []any{&dom, &k.code, &k.reason}, func() error {
		stored[dom] = k
		return nil
	}); err != nil {
		return err
	}
	var changed []invalidDomain
	keep := make([]string, 0, len(p.invalid))
	for _, iv := range p.invalid {
		keep = append(keep, iv.domain)
		if s, ok := stored[iv.domain]; !ok || s.code != iv.err.Code || s.reason != iv.err.Reason {
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
	err = p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		for _, iv := range changed {
			if _, err := tx.Exec(ctx, `INSERT INTO certrenew_invalid_domains (domain, code, reason, token) VALUES ($1, $2, $3, $4)
				ON CONFLICT (domain) DO UPDATE SET code = EXCLUDED.code, reason = EXCLUDED.reason,
					last_seen = now(), token = EXCLUDED.token`,
				iv.domain, iv.err.Code, iv.err.Reason, p.r.Token); err != nil {
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
		p.log.WarnContext(ctx, "custom domain cannot get a certificate", "domain", iv.domain, "code", iv.err.Code, "reason", iv.err.Reason)
	}
	return nil
}
