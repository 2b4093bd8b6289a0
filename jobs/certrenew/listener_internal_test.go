package certrenew

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// The service's HTTP-01 listener (what run serves on port 80) with
// PostgreSQL stopped before it starts: it accepts, and a request for a token
// is answered 503 with Retry-After once the handler's load wait is over,
// instead of waiting in the socket's queue for as long as the database is
// silent (the client's bound is only how long a broken build takes to fail).
func TestTheChallengeListenerAnswersWhilePostgreSQLHasNeverAnswered(t *testing.T) {
	pg := benchtest.StartPostgres(t)
	pool, err := pgxpool.New(context.Background(), pg.CreateDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pg.Stop(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop, err := serveChallenges(scheduler.Env{Instance: "server-a", Pool: pool, Log: benchtest.Logger(t)},
		[]scheduler.Socket{{Job: "cert-renewer", From: "test", Listener: ln}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(context.Background()) })

	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+certserve.ChallengePath+"Sol81eos51L1JGs4rUqNEGGu8NDaK78QIpEXhaDnIGU", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "shop.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("no answer from the challenge listener while PostgreSQL has never answered: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("%d, Retry-After %q, %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}
