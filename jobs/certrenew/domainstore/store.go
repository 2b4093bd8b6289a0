package domainstore

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/scheduler"
)

// Store is what PostgreSQL holds about each wanted domain: its name,
// its order in flight, its back-off and its current certificate. It
// guarantees that the domains are read on the database's clock, which it
// starts (Clock); that names that cannot get a certificate are recorded with
// their reason; that an order is recorded, within the budget, before the CA
// hears of it; and that every write it makes for a domain is fenced by the
// run's token and reflected in the in-memory domain only once committed —
// except the CA's URLs of an order (RecordURLs), noted even after the term
// ended because they only say where to look. Safe for concurrent use on
// distinct domains.
type Store struct {
	c      Config
	budget budgetLatch // found spent: no more orders this pass
}

// Config is what a Store works with, for one pass.
type Config struct {
	Pool             *pgxpool.Pool
	Keys             *keyring.Keyring
	Run              *scheduler.Run // fences every write
	Log              *slog.Logger
	Clock            *Clock // started by Load
	Policy           Policy
	Orders, Failures *prometheus.CounterVec // the job's: by job and result, by job and reason
}

// New returns the store of one pass.
func New(c Config) *Store { return &Store{c: c} }

// Policy is which custom domains want a certificate, and the rules of
// their orders and renewals (the job's options).
type Policy struct {
	Statuses           []string // custom_domains.status values that want a certificate
	RequirePublicTLD   bool     // refuse names whose TLD is not public (CheckPublicTLD)
	OrderBudget        int      // orders in any BudgetWindow
	RenewFraction      float64  // FallbackRenewAt's
	ShortRenewFraction float64
	ShortLifetime      time.Duration
}

// BudgetWindow is the window Policy.OrderBudget counts in.
const BudgetWindow = 3 * time.Hour

// CertName is the name a certificate for the custom domain raw is issued
// for, under p, or the *InvalidNameError that says why none can be.
func (p Policy) CertName(raw string) (string, error) {
	name, err := NormalizeDomain(raw)
	if err == nil && p.RequirePublicTLD {
		err = CheckPublicTLD(raw, name)
	}
	return name, err
}

// RenewAt is when to renew a certificate without a renewal window from the
// CA, under p (FallbackRenewAt).
func (p Policy) RenewAt(notBefore, notAfter time.Time) time.Time {
	return FallbackRenewAt(notBefore, notAfter, p.RenewFraction, p.ShortRenewFraction, p.ShortLifetime)
}

// FallbackRenewAt is when to renew a certificate when the CA offers no
// renewal window: at frac of its lifetime, or at shortFrac for a lifetime of
// at most short.
func FallbackRenewAt(notBefore, notAfter time.Time, frac, shortFrac float64, short time.Duration) time.Time {
	life := notAfter.Sub(notBefore)
	f := frac
	if life <= short {
		f = shortFrac
	}
	return notBefore.Add(time.Duration(float64(life) * f))
}

// Snapshot is what a pass starts from.
type Snapshot struct {
	Domains     []*Domain // the wanted names that can get a certificate
	Invalid     []Invalid // wanted names that cannot get a certificate
	PausedUntil time.Time // our clock: the pause an earlier pass recorded; zero: none
	PauseReason string
	Seen        string // the Fingerprint of what was loaded (the requests' part empty)
}

// Load reads the wanted domains, their state and current certificates, the
// pause, and the database's clock.
func (s *Store) Load(ctx context.Context) (*Snapshot, error) {
	db := s.c.Pool
	var dbNow time.Time
	var pausedFor float64
	var pauseReason *string
	if err := db.QueryRow(ctx, `SELECT now(),
			coalesce((SELECT extract(epoch FROM paused_until - now())::float8 FROM certrenew_job WHERE job = $1), 0),
			(SELECT pause_reason FROM certrenew_job WHERE job = $1)`, s.c.Run.Job).
		Scan(&dbNow, &pausedFor, &pauseReason); err != nil {
		return nil, err
	}
	s.c.Clock.set(dbNow)
	snap := &Snapshot{}
	if pausedFor > 0 {
		snap.PausedUntil = s.c.Clock.loaded.Add(time.Duration(pausedFor * float64(time.Second)))
		if pauseReason != nil {
			snap.PauseReason = *pauseReason
		}
	}

	// Taken before the rows are read: a row committed in between makes the
	// next look differ (one more pass), never the reverse (a row missed).
	// The requests' part is left empty: the pass handles (deletes) every
	// request it reads, so a request still there at the next look is one it
	// did not see.
	domainsFP, _, err := Fingerprint(ctx, db, s.c.Policy.Statuses)
	if err != nil {
		return nil, err
	}
	snap.Seen = domainsFP + "/"
	if snap.Domains, snap.Invalid, err = s.wanted(ctx); err != nil {
		return nil, err
	}
	if err := s.loadStates(ctx, snap.Domains); err != nil {
		return nil, err
	}
	return snap, nil
}

// Fingerprint is a digest of the custom_domains rows whose status is one of
// statuses (any row added, removed or changing status changes it) and,
// after a slash, of the operators' retry requests ("" when there are none).
func Fingerprint(ctx context.Context, db *pgxpool.Pool, statuses []string) (domains, requests string, err error) {
	err = db.QueryRow(ctx, `SELECT
			(SELECT coalesce(md5(string_agg(domain, E'\n' ORDER BY domain)), '') FROM custom_domains WHERE status = ANY($1)),
			(SELECT coalesce(md5(string_agg(domain || ' ' || requested_at, E'\n' ORDER BY domain)), '') FROM certrenew_retry_requests)`,
		statuses).Scan(&domains, &requests)
	return domains, requests, err
}

// wanted reads the wanted custom domains and turns each into its
// certificate's name (in order), or an invalid domain; rows that share a
// name share one domain.
func (s *Store) wanted(ctx context.Context) ([]*Domain, []Invalid, error) {
	rows, err := s.c.Pool.Query(ctx, `SELECT domain, added_at FROM custom_domains WHERE status = ANY($1) ORDER BY domain`, s.c.Policy.Statuses)
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
	byName := map[string]*Domain{}
	var domains []*Domain
	var invalid []Invalid
	for _, row := range srcs {
		name, err := s.c.Policy.CertName(row.raw)
		if err != nil {
			var ie *InvalidNameError
			errors.As(err, &ie)
			invalid = append(invalid, Invalid{domain: row.raw, err: ie})
			continue
		}
		if d, dup := byName[name]; dup {
			if row.addedAt.Before(d.addedAt) {
				d.addedAt = row.addedAt
			}
			continue // the same certificate serves both rows
		}
		d := &Domain{Name: name, source: row.raw, addedAt: row.addedAt}
		byName[name] = d
		domains = append(domains, d)
	}
	return domains, invalid, nil
}

// loadStates reads each domain's order state and current certificate.
func (s *Store) loadStates(ctx context.Context, domains []*Domain) error {
	byName := make(map[string]*Domain, len(domains))
	names := make([]string, len(domains))
	for i, d := range domains {
		byName[d.Name], names[i] = d, d.Name
	}
	rows, err := s.c.Pool.Query(ctx, `SELECT n.name,
			s.order_id, s.order_token, s.order_started_at, s.order_key_sealed,
			coalesce(s.attempt, 0), coalesce(s.Failures, 0), s.next_attempt_at, s.last_error,
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
		c := &Cert{}
		var d Domain
		if err := rows.Scan(&name, &d.OrderID, &d.orderToken, &d.orderStarted, &d.orderKey,
			&d.attempt, &d.Failures, &d.NextAttempt, &d.lastError,
			&certID, &chain, &renewAt, &c.ARIStart, &c.ARIEnd, &ariNext, &ariCertID, &certToken); err != nil {
			return err
		}
		t := byName[name]
		t.OrderID, t.orderToken, t.orderStarted, t.orderKey = d.OrderID, d.orderToken, d.orderStarted, d.orderKey
		t.attempt, t.Failures, t.NextAttempt, t.lastError = d.attempt, d.Failures, d.NextAttempt, d.lastError
		if certID == nil {
			continue
		}
		leaf, err := parseLeaf([]byte(*chain))
		if err != nil {
			s.c.Log.ErrorContext(ctx, "stored certificate cannot be parsed; ordering a new one", "domain", name, "certificate_id", *certID, "err", err)
			continue
		}
		c.id, c.Leaf, c.NotBefore, c.NotAfter = *certID, leaf, leaf.NotBefore, leaf.NotAfter
		c.RenewAt, c.ARINextCheck, c.ARICertID, c.token = *renewAt, *ariNext, *ariCertID, *certToken
		t.Cert = c
	}
	return rows.Err()
}

// invalidReason is why a recorded domain cannot get a certificate.
type invalidReason struct{ code, reason string }

// storedInvalid reads the invalid domains recorded so far.
func (s *Store) storedInvalid(ctx context.Context) (map[string]invalidReason, error) {
	rows, err := s.c.Pool.Query(ctx, `SELECT domain, code, reason FROM certrenew_invalid_domains`)
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

// RecordInvalid writes which wanted domains cannot get a certificate, and
// forgets those that were fixed or are no longer wanted. A domain is logged
// when it is first found invalid, not on every pass.
func (s *Store) RecordInvalid(ctx context.Context, invalid []Invalid) error {
	stored, err := s.storedInvalid(ctx)
	if err != nil {
		return err
	}
	var changed []Invalid
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
	err = s.c.Run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		for _, iv := range changed {
			if _, err := tx.Exec(ctx, `INSERT INTO certrenew_invalid_domains (domain, code, reason, token) VALUES ($1, $2, $3, $4)
				ON CONFLICT (domain) DO UPDATE SET code = EXCLUDED.code, reason = EXCLUDED.reason,
					last_seen = now(), token = EXCLUDED.token`,
				iv.domain, iv.err.Code, iv.err.Reason, s.c.Run.Token); err != nil {
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
		s.c.Log.WarnContext(ctx, "custom domain cannot get a certificate", "domain", iv.domain, "code", iv.err.Code, "reason", iv.err.Reason)
	}
	return nil
}
