package certserve_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/certtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// challenges starts the handler on the fixture's database, served over
// HTTP; arrived, if set, is called when a request reaches the handler.
func (f *fixture) challenges(arrived func(), opts ...certserve.ChallengesOption) (*certserve.Challenges, string) {
	f.t.Helper()
	h, err := certserve.NewChallenges(f.config(), opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	certtest.Run(f.t, h.Run, h.Ready())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived != nil {
			arrived()
		}
		h.ServeHTTP(w, r)
	}))
	f.t.Cleanup(srv.Close)
	return h, srv.URL
}

// present stores a token as the renewer's HTTP-01 provider does.
func (f *fixture) present(token, domain, keyAuth string, ttl time.Duration) {
	f.t.Helper()
	benchtest.Exec(f.t, f.pool, `INSERT INTO certrenew_challenges (token, domain, key_auth, fence_token, expires_at)
		VALUES ($1, $2, $3, 1, now() + make_interval(secs => $4))`, token, domain, keyAuth, ttl.Seconds())
}

func randomToken(t testing.TB) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// get asks base for token with the Host header host.
func get(t testing.TB, base, host, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+certserve.ChallengePath+token, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestATokenIsAnsweredForItsHostOnly(t *testing.T) {
	f := newFixture(t)
	pool := f.pool
	const token, expiredToken = "LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0", "expiredTokenAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	if _, err := pool.Exec(context.Background(), `INSERT INTO certrenew_challenges (token, domain, key_auth, fence_token, expires_at) VALUES
		($1, 'shop.example.com', $1 || '.thumbprint', 7, now() + interval '1 hour'),
		($2, 'shop.example.com', 'old', 7, now() - interval '1 second')`, token, expiredToken); err != nil {
		t.Fatal(err)
	}
	_, base := f.challenges(nil, certserve.WithMissWait(0, 0))

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
			req, _ := http.NewRequest(tc.method, base+tc.path, nil)
			req.Host = tc.host
			resp, err := http.DefaultClient.Do(req)
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

func TestUnknownTokensAndHostsCostPostgreSQLNothing(t *testing.T) {
	f := newFixture(t)
	token := randomToken(t)
	f.present(token, "shop.example.com", token+".thumb", time.Hour)
	_, base := f.challenges(nil, certserve.WithMissWait(0, 0))
	if code, body := get(t, base, "shop.example.com", token); code != http.StatusOK || body != token+".thumb" {
		t.Fatalf("the stored token: %d %q", code, body)
	}

	before := f.readerQueries()
	if before == 0 {
		t.Fatal("pg_stat_statements counted no statement of the reader, not even its first read: the measurement is blind")
	}
	for i := 0; i < 1000; i++ {
		if code, _ := get(t, base, fmt.Sprintf("h%d.example.com", i), randomToken(t)); code != http.StatusNotFound {
			t.Fatalf("a random token was answered %d", code)
		}
	}
	if after := f.readerQueries(); after != before {
		t.Errorf("PostgreSQL ran %d reader statements for 1,000 unknown tokens, want 0", after-before)
	}

	// Removed (the renewer's CleanUp), it is no longer answered.
	benchtest.Exec(t, f.pool, `DELETE FROM certrenew_challenges WHERE token = $1`, token)
	benchtest.Eventually(t, "the removed token to be refused", func() bool {
		code, _ := get(t, base, "shop.example.com", token)
		return code == http.StatusNotFound
	})
}

func TestARequestThatOvertakesItsTokensNotificationWaitsForIt(t *testing.T) {
	f := newFixture(t)
	arrived := make(chan struct{}, 1)
	_, base := f.challenges(func() { arrived <- struct{}{} }, certserve.WithMissWait(benchtest.Patience, 1))

	token := randomToken(t)
	type answer struct {
		code int
		body string
	}
	got := make(chan answer, 1)
	go func() {
		code, body := get(t, base, "shop.example.com", token)
		got <- answer{code, body}
	}()
	<-arrived // the CA's request is in before the token is stored
	f.present(token, "shop.example.com", token+".thumb", time.Hour)
	if a := <-got; a.code != http.StatusOK || a.body != token+".thumb" {
		t.Errorf("a request made before its token was stored: %d %q, want 200 and the key authorization", a.code, a.body)
	}
}

func TestTheChallengeServerClosesWhatClientsLeaveOpen(t *testing.T) {
	f := newFixture(t)
	h, _ := f.challenges(nil, certserve.WithMissWait(0, 0))
	// Two servers, each cutting one thing short, so that no timeout can cut
	// what the test must still get to do on a slow machine: the idle one
	// lets a request's headers take their time, then closes the
	// kept-alive connection; the other closes clients that send nothing,
	// or a body a byte at a time.
	idle, slow := certserve.DefaultServerLimits(), certserve.DefaultServerLimits()
	idle.IdleTimeout, idle.ReadHeaderTimeout, idle.ReadTimeout = 200*time.Millisecond, benchtest.Patience, benchtest.Patience
	slow.ReadHeaderTimeout, slow.ReadTimeout = 300*time.Millisecond, 300*time.Millisecond
	idleAddr, slowAddr := serveChallenges(t, h, idle), serveChallenges(t, h, slow)

	// 1,000 kept-alive connections after one request each, and as many
	// that never send one: every one is closed by the server.
	var wg sync.WaitGroup
	errs := make(chan error, 2001)
	for i := 0; i < 2000; i++ {
		wg.Add(1)
		go func(request bool) {
			defer wg.Done()
			if request {
				errs <- closedByServer(idleAddr, true)
			} else {
				errs <- closedByServer(slowAddr, false)
			}
		}(i%2 == 0)
	}
	// A body trickled one byte at a time.
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- trickle(slowAddr)
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func serveChallenges(t testing.TB, h http.Handler, l certserve.ServerLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := certserve.NewChallengeServer(h, l, benchtest.Logger(t))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// closedByServer opens a connection (sending one keep-alive request if
// request) and reads until the server closes it.
func closedByServer(addr string, request bool) error {
	c, err := net.DialTimeout("tcp", addr, benchtest.Patience)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(benchtest.Patience))
	r := bufio.NewReader(c)
	if request {
		fmt.Fprintf(c, "GET %s%s HTTP/1.1\r\nHost: shop.example.com\r\n\r\n", certserve.ChallengePath, strings.Repeat("a", 43))
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			return fmt.Errorf("the keep-alive request: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("an idle connection (request sent: %v) was not closed by the server: %w", request, err)
	}
	return nil
}

// trickle sends a POST whose body comes a byte at a time, until the server
// closes the connection.
func trickle(addr string) error {
	c, err := net.DialTimeout("tcp", addr, benchtest.Patience)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(benchtest.Patience))
	fmt.Fprintf(c, "POST %sx HTTP/1.1\r\nHost: shop.example.com\r\nContent-Length: 100000\r\n\r\n", certserve.ChallengePath)
	closed := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			closed <- fmt.Errorf("a trickled body held the connection for %v", benchtest.Patience)
			return
		}
		closed <- nil // EOF, or reset: closed by the server either way
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-closed:
			return err
		case <-tick.C:
			if _, err := c.Write([]byte("x")); err != nil {
				return <-closed
			}
		}
	}
}

// A request that reaches the handler before the pending tokens have first
// been read (a web tier restarting while the CA validates) is answered once
// they are, within the load wait (here longer than any slow machine's first
// read), not refused after the short miss wait.
func TestARequestBeforeTheFirstReadIsAnsweredOnceTheTokensAreRead(t *testing.T) {
	f := newFixture(t)
	token := randomToken(t)
	f.present(token, "shop.example.com", token+".thumbprint", time.Hour)
	h, err := certserve.NewChallenges(f.config(), certserve.WithMissWait(time.Millisecond, 4), certserve.WithLoadWait(benchtest.Patience))
	if err != nil {
		t.Fatal(err)
	}
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	type answer struct {
		code int
		body string
	}
	answered := make(chan answer, 1)
	go func() {
		code, body := get(t, srv.URL, "shop.example.com", token)
		answered <- answer{code, body}
	}()
	<-arrived
	time.Sleep(20 * time.Millisecond) // the restart's slow first read: far past the 1 ms miss wait
	certtest.Run(t, h.Run, h.Ready())
	if a := <-answered; a.code != http.StatusOK || a.body != token+".thumbprint" {
		t.Fatalf("a request made before the first read got %d %q, want 200 and the key authorization", a.code, a.body)
	}
}

// PostgreSQL stopped before the handler starts, and silent since: a request
// for a token — one that is stored, and one that is not — is answered, 503
// with Retry-After (whether the token exists cannot be known), at the end of
// the load wait, not held for as long as the database is silent (the client's
// bound is only how long a broken build takes to fail). Once PostgreSQL
// answers and the tokens are read, the stored token is served and the other
// is 404.
func TestAChallengeRequestIsAnswered503WhilePostgreSQLHasNeverAnswered(t *testing.T) {
	pg := benchtest.StartPostgres(t)
	url := dbtest.Migrate(t, pg.CreateDatabase(t))
	token, other := randomToken(t), randomToken(t)
	dbtest.Exec(t, url, fmt.Sprintf(`INSERT INTO certrenew_challenges (token, domain, key_auth, fence_token, expires_at)
		VALUES ('%s', 'shop.example.com', '%s.thumbprint', 1, now() + interval '1 hour')`, token, token))
	pg.Stop(t)

	cc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	h, err := certserve.NewChallenges(certserve.Config{DB: cc, Log: benchtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	ask := func(token string) (int, http.Header, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+certserve.ChallengePath+token, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "shop.example.com"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("no answer about a token while PostgreSQL has never answered: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(body)
	}
	for _, tok := range []string{token, other} {
		code, header, body := ask(tok)
		if code != http.StatusServiceUnavailable || header.Get("Retry-After") != "5" || header.Get("Cache-Control") != "no-store" {
			t.Errorf("before the tokens were ever read: %d, Retry-After %q, Cache-Control %q, %q; want 503, Retry-After 5, no-store",
				code, header.Get("Retry-After"), header.Get("Cache-Control"), body)
		}
	}

	pg.Start(t)
	waitFor(t, "the tokens read once PostgreSQL answers", h.Ready())
	if code, _, body := ask(token); code != http.StatusOK || body != token+".thumbprint" {
		t.Errorf("the stored token once read: %d %q; want 200 and its key authorization", code, body)
	}
	if code, _, _ := ask(other); code != http.StatusNotFound {
		t.Errorf("a token never stored, once the tokens were read: %d; want 404", code)
	}
}
