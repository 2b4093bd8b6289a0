package certrenew

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// retryRequest is a row of certrenew_retry_requests (certs retry).
type retryRequest struct {
	domain string
	at     time.Time
	by     string
}

// applyRetryRequests turns the operators' retry requests into the renewer's
// state: a requested domain that is backing off is tried in this pass (its
// next_attempt_at cleared, in the pass's fenced transaction), and every
// request read is deleted, handled or not (a domain no longer wanted, or
// not backing off, is logged). Its failure count is kept: if it fails again,
// the back-off goes on from where it was. A pause of the whole renewer (a
// 503) is not lifted.
func (p *pass) applyRetryRequests(ctx context.Context) error {
	rows, err := p.j.pool.Query(ctx, `SELECT domain, requested_at, requested_by FROM certrenew_retry_requests ORDER BY domain`)
	if err != nil {
		return err
	}
	reqs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (retryRequest, error) {
		var q retryRequest
		return q, r.Scan(&q.domain, &q.at, &q.by)
	})
	if err != nil || len(reqs) == 0 {
		return err
	}
	byName := make(map[string]*domain, len(p.domains))
	for _, d := range p.domains {
		byName[d.name] = d
	}
	var cleared []*domain
	var names []string
	var ats []time.Time
	for _, q := range reqs {
		names, ats = append(names, q.domain), append(ats, q.at)
		d := byName[q.domain]
		log := p.log.With("domain", q.domain, "requested_by", q.by, "requested_at", q.at)
		switch {
		case d == nil:
			log.WarnContext(ctx, "retry requested for a name that is not a wanted custom domain (removed, or invalid); request dropped")
		case d.nextAttempt == nil || !p.now().Before(*d.nextAttempt):
			log.InfoContext(ctx, "retry requested for a domain that is not backing off; nothing to clear", "failures", d.failures)
		default:
			log.InfoContext(ctx, "retry requested by an operator: the domain's back-off is cleared; it is tried in this pass",
				"failures", d.failures, "was_next_attempt", *d.nextAttempt)
			cleared = append(cleared, d)
		}
	}
	clearedNames := make([]string, len(cleared))
	for i, d := range cleared {
		clearedNames[i] = d.name
	}
	err = p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE certrenew_domains SET next_attempt_at = NULL, token = $2, updated_at = now()
			WHERE domain = ANY($1)`, clearedNames, p.r.Token); err != nil {
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
		d.nextAttempt = nil
	}
	return nil
}
