package certrenew_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/snip/snip-jobs/internal/testdb"
	"github.com/snip/snip-jobs/internal/testenv"
	"github.com/snip/snip-jobs/jobs/certrenew"
)

// The challenge handler answers a stored token only for its domain, and 404
// for everything else.
func TestChallengeHandlerAnswersOnlyTheTokensDomain(t *testing.T) {
	_, pool := testdb.New(t)
	const token, expiredToken = "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0", "expiredTokenAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	if _, err := pool.Exec(context.Background(), `INSERT INTO certrenew_challenges (token, domain, key_auth, fence_token, expires_at) VALUES
		($1, 'shop.example.com', $1 || '.thumbprint', 7, now() + interval '1 hour'),
		($2, 'shop.example.com', 'old', 7, now() - interval '1 second')`, token, expiredToken); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(certrenew.NewChallengeHandler(pool, testenv.Logger(t)))
	defer srv.Close()

	for _, tc := range []struct {
		name, method, host, path string
		status                   int
		body                     string
	}{
		{"the token for its domain", "GET", "shop.example.com", "/.well-known/acme-challenge/" + token, 200, token + ".thumbprint"},
		{"port and case ignored", "GET", "SHOP.example.com:80", "/.well-known/acme-challenge/" + token, 200, token + ".thumbprint"},
		{"HEAD", "HEAD", "shop.example.com", "/.well-known/acme-challenge/" + token, 200, ""},
		{"another domain", "GET", "evil.example.com", "/.well-known/acme-challenge/" + token, 404, ""},
		{"an IP address as Host", "GET", "127.0.0.1", "/.well-known/acme-challenge/" + token, 404, ""},
		{"an unknown token", "GET", "shop.example.com", "/.well-known/acme-challenge/unknownTokenBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB", 404, ""},
		{"an expired token", "GET", "shop.example.com", "/.well-known/acme-challenge/" + expiredToken, 404, ""},
		{"a token that is not base64url", "GET", "shop.example.com", "/.well-known/acme-challenge/..%2F..%2Fetc%2Fpasswd", 404, ""},
		{"POST", "POST", "shop.example.com", "/.well-known/acme-challenge/" + token, 404, ""},
		{"another path", "GET", "shop.example.com", "/", 404, ""},
		{"the prefix alone", "GET", "shop.example.com", "/.well-known/acme-challenge/", 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			req.Host = tc.host
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.status == 200 && string(body) != tc.body {
				t.Errorf("body %q, want %q", body, tc.body)
			}
		})
	}
}
