package main

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

const certsJobYAML = `
  - name: cert-renewer
    type: certrenew
    singleton: true
    options:
      key_env: SNIP_TEST_CERT_KEY
`

// certs list shows each wanted domain's state from the database alone (no
// etcd, no instance); certs retry records a request for a backing-off domain
// only, and says why not for the others (exit 1).
func TestCertsListShowsTheDomainsAndRetryAsksOnlyForBackingOffOnes(t *testing.T) {
	t.Parallel()
	url := benchtest.PostgresDB(t)
	path := writeConfig(t, config{instance: "server-1", endpoints: []string{"http://127.0.0.1:1"}, adminPort: freePort(t), jobs: certsJobYAML})
	env := dbEnv(migrate(t, path, url))
	dbtest.Exec(t, url, `INSERT INTO custom_domains (domain) VALUES ('Shop.Example.com'), ('printer.local'), ('new.example.org'), ('go.example.net');
		INSERT INTO certrenew_certificates (domain, chain_pem, key_sealed, key_id, serial, ari_cert_id, not_before, not_after,
			renew_at, ari_next_check, token, instance)
		VALUES ('go.example.net', 'stored by the renewer', '\x00', 'k', '01', 'id', now() - interval '1 day', now() + interval '89 days',
			now() + interval '59 days', now(), 7, 'server-1');
		INSERT INTO certrenew_domains (domain, source, failures, next_attempt_at, last_error, last_error_reason, last_error_at, token)
		VALUES ('shop.example.com', 'Shop.Example.com', 3, now() + interval '90 minutes',
			'urn:ietf:params:acme:error:dns :: no valid A records found', 'dns', now(), 7)`)

	r := snip(t, env, "certs", "list", "--config", path)
	if r.code != 0 {
		t.Fatalf("certs list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"DOMAIN", "NEXT ATTEMPT",
		"Shop.Example.com", "failing", "dns",
		"printer.local", "invalid", "not_public",
		"new.example.org", "pending",
		"go.example.net", "valid",
		"Shop.Example.com: urn:ietf:params:acme:error:dns :: no valid A records found",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("certs list lacks %q:\n%s", want, r.stdout)
		}
	}

	r = snip(t, env, "certs", "list", "--failing", "--json", "--config", path)
	var list []certrenew.DomainStatus
	if err := json.Unmarshal([]byte(r.stdout), &list); r.code != 0 || err != nil {
		t.Fatalf("certs list --failing --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	states := map[string]string{}
	for _, d := range list {
		states[d.Domain] = d.State
		if d.Name == "shop.example.com" && (d.Failures != 3 || d.NextAttempt == nil) {
			t.Errorf("certs list --json: %+v; want 3 failures and a next attempt", d)
		}
	}
	if want := map[string]string{"Shop.Example.com": "failing", "new.example.org": "pending", "printer.local": "invalid"}; !maps.Equal(states, want) {
		t.Errorf("certs list --failing --json: %v, want %v", states, want)
	}

	r = snip(t, env, "certs", "retry", "shop.example.com", "new.example.org", "printer.local", "--config", path)
	if r.code != 1 {
		t.Errorf("certs retry with two names that cannot be retried: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"shop.example.com: retry requested (3 failure(s), last dns;",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("certs retry's output lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, want := range []string{
		"new.example.org has no back-off to end",
		`"printer.local": invalid name (not_public)`,
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("certs retry's errors lack %q:\n%s", want, r.stderr)
		}
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if got := benchtest.Value[string](t, pool, `SELECT coalesce(string_agg(domain, ','), '') FROM certrenew_retry_requests`); got != "shop.example.com" {
		t.Errorf("retry requests recorded: %q, want shop.example.com only", got)
	}
	if r := snip(t, env, "certs", "list", "--config", path); !strings.Contains(r.stdout, "(retry requested)") {
		t.Errorf("certs list does not show the pending request:\n%s", r.stdout)
	}

	// A domain waiting for the CA's rate limit: the request is recorded, with a warning.
	dbtest.Exec(t, url, `INSERT INTO custom_domains (domain) VALUES ('busy.example.com');
		INSERT INTO certrenew_domains (domain, source, failures, next_attempt_at, last_error_reason, token)
		VALUES ('busy.example.com', 'busy.example.com', 0, now() + interval '1 hour', 'rate_limited', 7)`)
	r = snip(t, env, "certs", "retry", "busy.example.com", "--config", path)
	if r.code != 0 || !strings.Contains(r.stderr, "warning: busy.example.com is waiting for the CA's rate limit") {
		t.Errorf("certs retry of a rate-limited domain: exit %d, want 0 and a warning\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := snip(t, env, "certs", "renew", "--config", path); r.code != 2 {
		t.Errorf("certs renew: exit %d, want 2 (usage)", r.code)
	}

	// certs renew: a request for a domain with a certificate, a refusal for one without.
	r = snip(t, env, "certs", "renew", "GO.example.net", "new.example.org", "--config", path)
	if r.code != 1 || !strings.Contains(r.stdout, "go.example.net: renewal requested (current certificate 01,") ||
		!strings.Contains(r.stderr, "no current certificate to renew: new.example.org") {
		t.Errorf("certs renew of a certified and a new domain: exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := benchtest.Value[int64](t, pool, `SELECT count(*) FROM certrenew_retry_requests WHERE renew`); n != 1 {
		t.Errorf("%d renewal requests recorded, want 1 (go.example.net)", n)
	}
}
