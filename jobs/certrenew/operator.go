package certrenew

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
)

// policy is the options' part the domain store and the operators' commands
// apply.
func (o *Options) policy() domainstore.Policy {
	return domainstore.Policy{Statuses: o.Statuses, RequirePublicTLD: o.RequirePublicTLD, OrderBudget: o.OrderBudget,
		RenewFraction: o.RenewFraction, ShortRenewFraction: o.ShortRenewFraction, ShortLifetime: o.ShortLifetime}
}

// DomainStatus is one wanted custom domain as the renewer's tables show it
// (snip-jobs certs list).
type DomainStatus struct {
	Domain string `json:"domain"`         // as written in custom_domains
	Name   string `json:"name,omitempty"` // the certificate's name; "" when invalid
	// State is one of the State* constants (the metric's label), computed
	// on the database's clock.
	State        string     `json:"state"`
	NotAfter     *time.Time `json:"not_after,omitempty"`
	RenewAt      *time.Time `json:"renew_at,omitempty"`
	OrderStarted *time.Time `json:"order_started,omitempty"` // an order in flight
	Failures     int        `json:"failures,omitempty"`
	NextAttempt  *time.Time `json:"next_attempt,omitempty"` // backing off until then
	ErrorReason  string     `json:"error_reason,omitempty"` // the last failure's reason, or the invalid name's code
	Error        string     `json:"error,omitempty"`
	RetryAsked   *time.Time `json:"retry_requested,omitempty"` // a retry request not yet handled
}

// List reads the state of every wanted custom domain (custom_domains rows
// whose status is one of opts.Statuses), sorted by domain. It only reads;
// what it shows is as of the renewer's last writes.
func List(ctx context.Context, pool *pgxpool.Pool, opts Options) ([]DomainStatus, error) {
	rows, err := pool.Query(ctx, `SELECT DISTINCT domain FROM custom_domains WHERE status = ANY($1) ORDER BY domain`, opts.Statuses)
	if err != nil {
		return nil, fmt.Errorf("certrenew: read custom_domains: %w", err)
	}
	raws, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("certrenew: read custom_domains: %w", err)
	}
	out := make([]DomainStatus, len(raws))
	var names []string
	at := map[string][]int{} // name -> indexes in out
	for i, raw := range raws {
		out[i].Domain = raw
		name, err := opts.policy().CertName(raw)
		var ie *domainstore.InvalidNameError
		if errors.As(err, &ie) {
			out[i].State, out[i].ErrorReason, out[i].Error = domainstore.StateInvalid, ie.Code, ie.Reason
			continue
		}
		out[i].Name = name
		if at[name] == nil {
			names = append(names, name)
		}
		at[name] = append(at[name], i)
	}
	rows, err = pool.Query(ctx, `SELECT n.name, now(), c.not_after, c.renew_at, s.order_started_at, coalesce(s.failures, 0),
			s.next_attempt_at, coalesce(s.last_error_reason, ''), coalesce(s.last_error, ''), r.requested_at
		FROM unnest($1::text[]) AS n(name)
		LEFT JOIN certrenew_domains s ON s.domain = n.name
		LEFT JOIN certrenew_certificates c ON c.domain = n.name AND c.current
		LEFT JOIN certrenew_retry_requests r ON r.domain = n.name`, names)
	if err != nil {
		return nil, fmt.Errorf("certrenew: read the renewer's state: %w", err)
	}
	var name string
	var now time.Time
	var s DomainStatus
	if _, err := pgx.ForEachRow(rows, []any{&name, &now, &s.NotAfter, &s.RenewAt, &s.OrderStarted, &s.Failures,
		&s.NextAttempt, &s.ErrorReason, &s.Error, &s.RetryAsked}, func() error {
		s.State = domainstore.StateAt(now, s.Failures, s.NotAfter, s.RenewAt)
		for _, i := range at[name] {
			s.Domain, s.Name = out[i].Domain, name
			out[i] = s
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("certrenew: read the renewer's state: %w", err)
	}
	return out, nil
}

// ErrNotBackingOff: a retry was asked for a domain that is not waiting to
// try again (no failure recorded, or its next attempt is already due).
var ErrNotBackingOff = errors.New("certrenew: the domain is not backing off")

// RetryRequest is what RequestRetry recorded.
type RetryRequest struct {
	Name        string    // the certificate's name
	Failures    int       // failures so far (kept: a new failure backs off further)
	NextAttempt time.Time // when the renewer would have tried again by itself
	ErrorReason string    // the last failure's reason
}

// RequestRetry asks the renewer's leader to try the custom domain raw again
// at its next pass, instead of at the end of its back-off (snip-jobs certs
// retry). It writes only a request (certrenew_retry_requests); the leader
// clears the back-off in its own fenced transaction, and wakes for it within
// new_domain_check. An invalid name is an *InvalidNameError; a name that is
// not backing off is ErrNotBackingOff (nothing is recorded).
func RequestRetry(ctx context.Context, pool *pgxpool.Pool, opts Options, raw, by string) (RetryRequest, error) {
	name, err := opts.policy().CertName(raw)
	if err != nil {
		return RetryRequest{}, err
	}
	r := RetryRequest{Name: name}
	err = pool.QueryRow(ctx, `SELECT failures, next_attempt_at, coalesce(last_error_reason, '') FROM certrenew_domains
		WHERE domain = $1 AND next_attempt_at > now()`, name).Scan(&r.Failures, &r.NextAttempt, &r.ErrorReason)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return r, fmt.Errorf("%w: %s has no back-off running (no failure recorded, or its next attempt is already due)", ErrNotBackingOff, name)
	case err != nil:
		return r, fmt.Errorf("certrenew: read %s's state: %w", name, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO certrenew_retry_requests (domain, requested_by) VALUES ($1, $2)
		ON CONFLICT (domain) DO UPDATE SET requested_at = now(), requested_by = EXCLUDED.requested_by`, name, by); err != nil {
		return r, fmt.Errorf("certrenew: record the retry request for %s: %w", name, err)
	}
	return r, nil
}

// ErrNoCertificateToRenew is returned by RequestRenewal for a name without a
// current certificate: it is ordered at once anyway, or is failing (retry).
var ErrNoCertificateToRenew = errors.New("certrenew: no current certificate to renew")

// RenewRequest is what RequestRenewal recorded.
type RenewRequest struct {
	Name     string    // the certificate's name
	Serial   string    // the current certificate's serial (hex)
	NotAfter time.Time // and its not-after
}

// RequestRenewal asks the renewer's leader to renew the custom domain raw's
// current certificate at its next pass, whatever its renewal instant (snip-jobs
// certs renew): a key thought compromised, a certificate to re-issue. It
// writes only a request; the leader makes the certificate due in its own
// fenced transaction, and wakes for it within new_domain_check. An invalid
// name is an *InvalidNameError; a name without a current certificate is
// ErrNoCertificateToRenew (nothing is recorded).
func RequestRenewal(ctx context.Context, pool *pgxpool.Pool, opts Options, raw, by string) (RenewRequest, error) {
	name, err := opts.policy().CertName(raw)
	if err != nil {
		return RenewRequest{}, err
	}
	r := RenewRequest{Name: name}
	err = pool.QueryRow(ctx, `SELECT serial, not_after FROM certrenew_certificates WHERE domain = $1 AND current`, name).
		Scan(&r.Serial, &r.NotAfter)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return r, fmt.Errorf("%w: %s (a new domain is ordered at once; a failing one is retried with certs retry)", ErrNoCertificateToRenew, name)
	case err != nil:
		return r, fmt.Errorf("certrenew: read %s's certificate: %w", name, err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO certrenew_retry_requests (domain, requested_by, renew) VALUES ($1, $2, true)
		ON CONFLICT (domain) DO UPDATE SET requested_at = now(), requested_by = EXCLUDED.requested_by, renew = true`, name, by); err != nil {
		return r, fmt.Errorf("certrenew: record the renewal request for %s: %w", name, err)
	}
	return r, nil
}
