package certrenew

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-acme/lego/v5/challenge"
	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/scheduler"
)

// ChallengePath is where HTTP-01 tokens are served (RFC 8555 §8.3).
const ChallengePath = "/.well-known/acme-challenge/"

// challengeTTL is how long a stored token is served: past it the row is
// ignored and removed by the next pass (a term that ended between Present
// and CleanUp cannot remove its own tokens).
const challengeTTL = time.Hour

// Querier is what the challenge handler and Current read through: a
// *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// NewChallengeHandler serves HTTP-01 key authorizations from the shared
// challenge table, so that whichever instance the CA reaches answers for an
// order placed by any instance. It answers GET and HEAD of
// /.well-known/acme-challenge/<token> with the key authorization when the
// token is stored for exactly the request's Host (port and case ignored) and
// has not expired; everything else gets 404, and a database failure 503.
// Mount it on every instance's challenge listener (Options.ChallengeListen,
// port 80 of the customers' domains).
func NewChallengeHandler(db Querier, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &challengeHandler{db: db, log: log}
}

type challengeHandler struct {
	db  Querier
	log *slog.Logger
}

// challengeQueryTimeout bounds the database read of one challenge request.
const challengeQueryTimeout = 5 * time.Second

func (h *challengeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.URL.Path, ChallengePath)
	if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) || !validToken(token) {
		http.NotFound(w, r)
		return
	}
	host := requestHost(r.Host)
	if host == "" {
		http.NotFound(w, r)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), challengeQueryTimeout)
	defer cancel()
	var keyAuth string
	err := h.db.QueryRow(ctx, `SELECT key_auth FROM certrenew_challenges
		WHERE token = $1 AND domain = $2 AND expires_at > now()`, token, host).Scan(&keyAuth)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		h.log.DebugContext(ctx, "challenge not found", "domain", host, "token", token)
		http.NotFound(w, r)
		return
	case err != nil:
		h.log.WarnContext(ctx, "challenge lookup failed", "domain", host, "err", err)
		http.Error(w, "challenge store unavailable", http.StatusServiceUnavailable)
		return
	}
	h.log.InfoContext(ctx, "challenge answered", "domain", host)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(keyAuth))
}

// validToken: RFC 8555 tokens are base64url without padding; at least 128
// bits of entropy (22 characters), and we accept up to 256.
func validToken(t string) bool {
	if len(t) < 16 || len(t) > 256 {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// requestHost is the Host header without port, lower case; "" if it is not a
// name.
func requestHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.ToLower(h)
	if h == "" || strings.ContainsAny(h, "/[]@ ") {
		return ""
	}
	return h
}

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
