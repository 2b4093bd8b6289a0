package domainstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// retryRequest is a row of certrenew_retry_requests (certs retry, or
// certs renew when renew is set).
type retryRequest struct {
	domain string
	at     time.Time
	by     string
	renew  bool
}

// ApplyRetryRequests turns the operators' requests into the renewer's
// state: a requested domain that is backing off is tried in this pass (its
// next_attempt_at cleared, in the pass's fenced transaction); a renewal
// request also makes the domain's current certificate due now (and keeps the
// CA's renewal window from moving it for an hour). Every request read is
// deleted, handled or not (a domain no longer wanted, or with nothing to do,
// is logged). The failure count is kept: if it fails again, the back-off
// goes on from where it was. A pause of the whole renewer (a 503) is not
// lifted.
func (s *Store) ApplyRetryRequests(ctx context.Context, domains []*Domain) error {
	reqs, err := s.retryRequests(ctx)
	if err != nil || len(reqs) == 0 {
		return err
	}
	cleared, renewed := s.triage(ctx, reqs, domains)
	names, ats := make([]string, len(reqs)), make([]time.Time, len(reqs))
	for i, q := range reqs {
		names[i], ats[i] = q.domain, q.at
	}
	err = s.c.Run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE certrenew_domains SET next_attempt_at = NULL, token = $2, updated_at = now()
			WHERE domain = ANY($1)`, domainNames(cleared), s.c.Run.Token); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE certrenew_certificates SET renew_at = now() - interval '1 second',
				ari_next_check = greatest(ari_next_check, now() + make_interval(secs => $2))
			WHERE domain = ANY($1) AND current`, domainNames(renewed), renewHold.Seconds()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM certrenew_retry_requests r USING unnest($1::text[], $2::timestamptz[]) AS h(domain, at)
			WHERE r.domain = h.domain AND r.requested_at = h.at`, names, ats)
		return err
	})
	if err != nil {
		return err
	}
	for _, d := range cleared {
		d.NextAttempt = nil
	}
	for _, d := range renewed {
		d.Cert.RenewAt = s.c.Clock.Now().Add(-time.Second)
		if hold := s.c.Clock.Now().Add(renewHold); d.Cert.ARINextCheck.Before(hold) {
			d.Cert.ARINextCheck = hold
		}
	}
	return nil
}

// retryRequests reads the operators' requests, by domain.
func (s *Store) retryRequests(ctx context.Context) ([]retryRequest, error) {
	rows, err := s.c.Pool.Query(ctx, `SELECT domain, requested_at, requested_by, renew FROM certrenew_retry_requests ORDER BY domain`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (retryRequest, error) {
		var q retryRequest
		return q, r.Scan(&q.domain, &q.at, &q.by, &q.renew)
	})
}

// triage decides, and logs, what each request does: the domains whose
// back-off is cleared, and those whose certificate is due now too.
func (s *Store) triage(ctx context.Context, reqs []retryRequest, domains []*Domain) (cleared, renewed []*Domain) {
	byName := make(map[string]*Domain, len(domains))
	for _, d := range domains {
		byName[d.Name] = d
	}
	for _, q := range reqs {
		d := byName[q.domain]
		log := s.c.Log.With("domain", q.domain, "requested_by", q.by, "requested_at", q.at)
		switch {
		case d != nil && q.renew && d.Cert != nil:
			log.InfoContext(ctx, "renewal requested by an operator: the current certificate is due now", "certificate_id", d.Cert.id)
			renewed, cleared = append(renewed, d), append(cleared, d)
		case d == nil:
			log.WarnContext(ctx, "retry requested for a name that is not a wanted custom domain (removed, or invalid); request dropped", "renew", q.renew)
		case d.NextAttempt == nil || !s.c.Clock.Now().Before(*d.NextAttempt):
			log.InfoContext(ctx, "retry requested for a domain that is not backing off; nothing to clear", "failures", d.Failures)
		default:
			log.InfoContext(ctx, "retry requested by an operator: the domain's back-off is cleared; it is tried in this pass",
				"failures", d.Failures, "was_next_attempt", *d.NextAttempt)
			cleared = append(cleared, d)
		}
	}
	return cleared, renewed
}

// renewHold is how long a renewal an operator asked for keeps the CA's
// renewal window from moving the certificate's renewal instant (the first
// ARI answer after an issuance picks a new one).
const renewHold = time.Hour
