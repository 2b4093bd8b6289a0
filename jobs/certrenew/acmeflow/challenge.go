package acmeflow

import (
	"context"
	"fmt"
	"time"

	"github.com/go-acme/lego/v5/challenge"
	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/scheduler"
)

// challengeTTL is how long a stored token is served: past it the row is
// ignored and removed by the next pass (a term that ended between Present
// and CleanUp cannot remove its own tokens).
const challengeTTL = time.Hour

// httpProvider is lego's HTTP-01 challenge.Provider over the shared table.
// Its writes are fenced by the run's token: a superseded leader cannot
// publish tokens.
type httpProvider struct {
	r *scheduler.Run
}

var _ challenge.Provider = (*httpProvider)(nil)

// Present stores the key authorization for domain's token.
func (p *httpProvider) Present(ctx context.Context, domain, token, keyAuth string) error {
	err := p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO certrenew_challenges (token, domain, key_auth, fence_token, expires_at)
			VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
			ON CONFLICT (token) DO UPDATE SET domain = EXCLUDED.domain, key_auth = EXCLUDED.key_auth,
				fence_token = EXCLUDED.fence_token, created_at = now(), expires_at = EXCLUDED.expires_at`,
			token, domain, keyAuth, p.r.Token, challengeTTL.Seconds())
		return err
	})
	if err != nil {
		return fmt.Errorf("certrenew: store HTTP-01 token for %s: %w", domain, err)
	}
	return nil
}

// CleanUp removes domain's token.
func (p *httpProvider) CleanUp(ctx context.Context, domain, token, _ string) error {
	err := p.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM certrenew_challenges WHERE token = $1 AND domain = $2`, token, domain)
		return err
	})
	if err != nil {
		return fmt.Errorf("certrenew: remove HTTP-01 token for %s: %w", domain, err)
	}
	return nil
}

// DNS01Provider is the seam for DNS-01 challenges (wildcards, names whose
// port 80 does not reach Snip): lego's challenge.Provider publishing
// _acme-challenge TXT records (dns01.GetChallengeInfo gives the record), with
// the propagation timeout it needs. None is implemented: give one with
// WithDNS01Provider and the renewer solves DNS-01 instead of HTTP-01.
// Wildcard names are still refused by NormalizeDomain; accepting them is the
// second half of that work (docs/certrenew.md, "DNS-01").
type DNS01Provider interface {
	challenge.ProviderTimeout
}
