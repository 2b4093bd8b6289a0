package devcluster

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
)

// demoJob is one job of the demo's config.
type demoJob struct {
	Name string
	// Type must be built into the binary for the job to be in the demo.
	Type string
	// Everywhere: not a singleton (as its YAML says).
	Everywhere bool
	// NeedsCA: only with an ACME test CA (see startCA).
	NeedsCA bool
	// YAML is the job's entry in the jobs list, a text/template over
	// demoEnv.
	YAML string
}

// demoEnv is what the demo jobs' entries may refer to.
type demoEnv struct {
	Dir string  // the cluster's folder
	CA  *acmeCA // nil without a test CA
	// Challenge is where this instance serves HTTP-01 tokens (the
	// renewer's challenge_listen); "" without the certrenew type.
	Challenge string
	// Script is the exec demo's program, Psql the client it runs, and
	// Database the URL it connects with (no password: dev's PostgreSQL
	// trusts loopback).
	Script, Psql, Database string
}

// demoJobs are the jobs the instances run, in this order. To add one, add an
// entry; it joins the demo once its type is registered (and, with NeedsCA,
// once startCA returns a CA).
var demoJobs = []demoJob{
	{Name: "aggregator", Type: "aggregator", YAML: `
  # Folds the clicks of click_events into link_counts and link_hourly_counts,
  # each exactly once, in fenced batches. Continuous: it runs for as long as
  # its term lasts.
  - name: aggregator
    type: aggregator
    singleton: true
    continuous: true
`},
	{Name: "heartbeat", Type: "sql", YAML: `
  # A singleton that writes a row every second through the fence: the row
  # names the instance and the token of the term it was written in.
  - name: heartbeat
    type: sql
    singleton: true
    every: 1s
    grace: 2s
    options:
      statement: INSERT INTO dev_heartbeats (instance, token) VALUES (@instance, @token)
`},
	{Name: "weekly-report", Type: "weeklyreport", YAML: `
  # The weekly report, on a cron schedule of every minute instead of Mondays
  # 08:00, to see slots being claimed; the first slot stores last week's
  # report, later ones find it stored already.
  - name: weekly-report
    type: weeklyreport
    singleton: true
    cron: "* * * * *"
    timezone: UTC
    catch_up: latest
    catch_up_window: 1h
`},
	{Name: "cert-renewer", Type: "certrenew", NeedsCA: true, YAML: `
  # Keeps a certificate for each custom domain, from the in-process test CA.
  - name: cert-renewer
    type: certrenew
    singleton: true
    every: 30s
    grace: 10s
    options:
      directory: {{.CA.Directory}}
      profile: {{.CA.Profile}}
      ca_roots_file: {{.CA.RootsFile}}
      challenge_listen: {{.Challenge}}
      key_file: {{.CA.KeyFile}}
      lock_delay: 10s
      new_domain_check: 1s        # new domains and certs retry/renew acted on within a second
      require_public_tld: false   # the demo's names are under .test
`},
	{Name: "fenced-script", Type: "exec", YAML: `
  # Any program behind the singleton gate: a shell script that writes a row
  # a second through the SQL fence (snip_jobs_fence, its token from the
  # environment). When its term ends, every process of it is stopped, and
  # proven gone, before another instance may start it.
  - name: fenced-script
    type: exec
    singleton: true
    continuous: true
    grace: 5s
    options:
      command: [/bin/sh, "{{.Script}}"]
      env: {PSQL: "{{.Psql}}", DEV_DATABASE: "{{.Database}}"}
      kill_grace: 2s
`},
	{Name: "prune-heartbeats", Type: "sql", Everywhere: true, YAML: `
  # Runs on every instance (not a singleton): each prunes old heartbeats.
  - name: prune-heartbeats
    type: sql
    singleton: false
    every: 30s
    options:
      statement: DELETE FROM dev_heartbeats WHERE at < now() - interval '10 minutes'
`},
}

// selectDemoJobs returns the demo jobs whose type is registered (and that
// have what else they need).
func selectDemoJobs(types configs.Types, ca *acmeCA) []demoJob {
	var out []demoJob
	for _, j := range demoJobs {
		if _, ok := types.Options(j.Type); !ok || j.NeedsCA && ca == nil {
			continue
		}
		out = append(out, j)
	}
	return out
}

// instanceConfig is the config file of one instance.
type instanceConfig struct {
	Instance string
	// Backend is the config's etcd: or kubernetes: section, and
	// LeadershipBackend its leadership.backend line ("" for etcd).
	Backend, LeadershipBackend string
	URLFile                    string
	TTL                        time.Duration
	Listen                     string
	Jobs                       []demoJob
	Env                        demoEnv
	ShutdownIn                 time.Duration
}

var configTemplate = template.Must(template.New("config").Parse(`# Written by snip-dev for {{.Instance}}; removed when dev stops.
# configs/snip-jobs.example.yaml documents every setting.
instance: {{.Instance}}
{{.Backend}}postgres:
  url_file: {{.URLFile}}
leadership:
{{- with .LeadershipBackend}}
  {{.}}
{{- end}}
  # Short, so that a killed leader is replaced within seconds.
  ttl: {{.TTL}}
  margin: {{.Margin}}
http:
  listen: {{.Listen}}
log:
  format: text
  level: info
shutdown_timeout: {{.ShutdownIn}}
jobs:{{range .Jobs}}{{.YAML}}{{end}}`))

// render writes the config, checking it with types as `snip-jobs validate`
// would.
func (ic instanceConfig) render(types configs.Types, path string) ([]byte, error) {
	var jobs []demoJob
	for _, j := range ic.Jobs {
		t, err := template.New(j.Name).Option("missingkey=error").Parse(j.YAML)
		if err != nil {
			return nil, fmt.Errorf("demo job %s: %w", j.Name, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, ic.Env); err != nil {
			return nil, fmt.Errorf("demo job %s: %w", j.Name, err)
		}
		j.YAML = b.String()
		jobs = append(jobs, j)
	}
	var b bytes.Buffer
	err := configTemplate.Execute(&b, struct {
		instanceConfig
		Margin time.Duration
		Jobs   []demoJob
	}{ic, ic.TTL * 3 / 10, jobs})
	if err != nil {
		return nil, err
	}
	if _, err := configs.Parse(path, b.Bytes(), types); err != nil {
		return nil, fmt.Errorf("the generated config of %s is not valid (a bug in the demo's jobs):\n%w", ic.Instance, err)
	}
	return b.Bytes(), nil
}

// The demo's links; the first one goes viral.
var demoLinks = []struct {
	id   int64
	slug string
}{{1, "launch-video"}, {2, "pricing"}, {3, "docs-quickstart"}, {4, "careers"}, {5, "blog-dst-bugs"}}

// demoDomains are customers' custom domains, for the certificate renewer.
var demoDomains = []string{"go.acme-shoes.test", "links.bakery-bern.test", "s.tiny-startup.test"}

// seed creates the dev-only table and the demo data. Tables owned by jobs that
// are still in progress (custom_domains) are filled only if they exist.
func seed(ctx context.Context, pool *pgxpool.Pool) (domains int, err error) {
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS dev_heartbeats (
			id bigserial PRIMARY KEY, instance text NOT NULL, token bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
		`CREATE TABLE IF NOT EXISTS dev_script_beats (
			id bigserial PRIMARY KEY, instance text NOT NULL, token bigint NOT NULL, pid integer NOT NULL,
			at timestamptz NOT NULL DEFAULT now())`,
	}
	for _, l := range demoLinks {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO links (id, slug) VALUES (%d, '%s') ON CONFLICT DO NOTHING`, l.id, l.slug))
	}
	// Two weeks of hourly counts, so that the weekly report has a week and
	// the week before to compare; the viral link grows in the last one.
	stmts = append(stmts, `
		INSERT INTO link_hourly_counts (link_id, hour, clicks)
		SELECT l.id, h,
		       (l.id * 7 + extract(hour FROM h)::int * 3) % 40
		       + CASE WHEN l.id = 1 AND h > now() - interval '7 days' THEN 60 ELSE 0 END
		FROM links l,
		     generate_series(date_bin('1 hour', now() - interval '14 days', '2000-01-01 00:00:00+00'),
		                     date_bin('1 hour', now(), '2000-01-01 00:00:00+00') - interval '1 hour',
		                     interval '1 hour') AS h
		WHERE l.id BETWEEN 1 AND 5
		ON CONFLICT DO NOTHING`,
		`INSERT INTO link_counts (link_id, clicks)
		SELECT link_id, sum(clicks) FROM link_hourly_counts GROUP BY link_id
		ON CONFLICT (link_id) DO UPDATE SET clicks = excluded.clicks`)
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil {
			return 0, fmt.Errorf("demo data: %w", err)
		}
	}
	if ok, err := tableExists(ctx, pool, "custom_domains"); err != nil || !ok {
		return 0, err
	}
	for _, d := range demoDomains {
		if _, err := pool.Exec(ctx, `INSERT INTO custom_domains (domain) VALUES ($1) ON CONFLICT DO NOTHING`, d); err != nil {
			return 0, fmt.Errorf("demo domains: %w", err)
		}
	}
	return len(demoDomains), nil
}

func tableExists(ctx context.Context, pool *pgxpool.Pool, name string) (bool, error) {
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		return false, fmt.Errorf("look for table %s: %w", name, err)
	}
	return ok, nil
}

// feeder inserts a stream of clicks on the viral link (and a few on the
// others) until ctx ends.
type feeder struct {
	pool   *pgxpool.Pool
	events bool // into click_events (the aggregator counts them); else into the counts directly
	log    *slog.Logger

	mu       sync.Mutex
	inserted int64
}

const feedEvery = 250 * time.Millisecond

func (f *feeder) run(ctx context.Context) {
	t := time.NewTicker(feedEvery)
	defer t.Stop()
	var lastErr string
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// 20 to 60 clicks a tick, in slow waves: 80 to 240 a second.
		n := 40 + int(20*math.Sin(float64(i)/15))
		other := int64(2 + i%4)
		err := f.insert(ctx, n, other)
		switch {
		case err != nil && ctx.Err() == nil && err.Error() != lastErr:
			f.log.Warn("demo clicks: insert failed (retrying every tick; logged once)", "err", err)
			lastErr = err.Error()
		case err == nil:
			lastErr = ""
			f.mu.Lock()
			f.inserted += int64(n + 1)
			f.mu.Unlock()
		}
	}
}

var (
	referrers = []string{"news.ycombinator.com", "t.co", "www.reddit.com", "mastodon.social", "www.google.com"}
	countries = []string{"US", "FR", "DE", "BR", "IN", "JP", "CH"}
)

func (f *feeder) insert(ctx context.Context, viral int, other int64) error {
	if f.events {
		_, err := f.pool.Exec(ctx, `
			INSERT INTO click_events (link_id, referrer_host, country)
			SELECT CASE WHEN g = 0 THEN $2 ELSE 1 END,
			       ($3::text[])[1 + (g % cardinality($3::text[]))],
			       ($4::text[])[1 + ((g * 7) % cardinality($4::text[]))]
			FROM generate_series(0, $1) AS g`, viral, other, referrers, countries)
		return err
	}
	_, err := f.pool.Exec(ctx, `
		WITH c(link_id, clicks) AS (VALUES (1::bigint, $1::bigint), ($2::bigint, 1::bigint)),
		hourly AS (
			INSERT INTO link_hourly_counts (link_id, hour, clicks)
			SELECT link_id, date_bin('1 hour', now(), '2000-01-01 00:00:00+00'), clicks FROM c
			ON CONFLICT (link_id, hour) DO UPDATE SET clicks = link_hourly_counts.clicks + excluded.clicks)
		INSERT INTO link_counts (link_id, clicks) SELECT link_id, clicks FROM c
		ON CONFLICT (link_id) DO UPDATE SET clicks = link_counts.clicks + excluded.clicks, updated_at = now()`,
		viral, other)
	return err
}

func (f *feeder) count() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inserted
}

// where says where the clicks go, for people.
func (f *feeder) where() string {
	if f.events {
		return "click_events (the aggregator counts them)"
	}
	return "link_hourly_counts and link_counts directly (no aggregator in this binary yet)"
}

// indent is for messages that quote several lines.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}
