package grafana

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/jobs/builtin"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/clitest"
	"github.com/snip/snip-jobs/testbench/devcluster"
	"github.com/snip/snip-jobs/testbench/promtest"
)

// scrapeInterval is the test Prometheus's, and the datasource's in
// Grafana's terms ($__rate_interval is computed from it).
const scrapeInterval = time.Second

// Every query of the dashboard returns data from a real Prometheus
// scraping a real cluster: snip-dev's (three snip-jobs processes on an
// embedded etcd, with the aggregator, sql, weekly report, certificate
// renewer against an in-process Pebble, and exec jobs, and a stream of
// clicks), scraped every second with deploy/prometheus's honor_labels. The
// test makes happen what the panels count once it has happened: a write
// refused by the fence (a newer token written to the heartbeat's resource,
// as a newer term's would be), a certificate renewed on request (an order),
// a paused job, the exec job handed over (its program's run ends), and a
// drained instance. Then each variable's
// query (label_values) and each panel's, with the variables as Grafana
// substitutes them, is asked of Prometheus as Grafana asks it: a range
// query over the test's time for a graph, an instant query for a table or
// a stat. A query that does not parse fails at once; one that returns no
// series is asked again until Prometheus has the data, and fails after
// benchtest.Patience: a series the code no longer exports never comes.
func TestEveryQueryOfTheDashboardReturnsDataFromARealPrometheus(t *testing.T) {
	ctx := context.Background()
	d := load(t)
	c, err := devcluster.Start(ctx, devcluster.Config{Executable: snipJobs, Types: builtin.Registry(), HTTPBase: -1,
		Out: io.Discard, Log: benchtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	var targets []string
	for _, in := range c.Instances() {
		u, err := url.Parse(in.Page)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, u.Host)
	}
	prom, err := promtest.Start(ctx, promtest.Options{JobName: "snip-jobs", Targets: targets, Interval: scrapeInterval, HonorLabels: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prom.Close)
	wctx, cancel := context.WithTimeout(ctx, benchtest.Patience)
	defer cancel()
	if err := prom.WaitTargetsUp(wctx); err != nil {
		t.Fatalf("%v (Prometheus's log: %s)", err, prom.Log())
	}
	firstUp := time.Now()

	happen(t, c, prom)

	vars := variables(t, d, prom)
	var queries []query
	for _, p := range d.allPanels() {
		for _, q := range p.Targets {
			queries = append(queries, query{panel: p.Title, ref: q.RefID, expr: q.Expr, instant: q.Instant})
		}
	}
	waitForData(t, prom, queries, vars, firstUp)
}

// happen makes happen, on cluster c, what some panels count only once it
// has happened, with the snip-jobs commands an operator would use.
func happen(t *testing.T, c *devcluster.Cluster, prom *promtest.Server) {
	t.Helper()
	refuseAHeartbeatWrite(t, c.DatabaseURL())
	seen(t, prom, "snip_jobs_fenced_rejections_total") // before a hand-over of the heartbeat without a write
	web, ok := c.WebTier()
	if !ok {
		t.Fatal("the dev cluster has no certificate renewer")
	}
	instances := c.Instances()
	for _, args := range [][]string{
		{"certs", "renew", web.Domains[0]}, // an order
		{"pause", "weekly-report", "--reason", "dashboard test"},
		{"resign", "fenced-script"}, // its leader, whoever it is now: the program's run ends
		{"drain", "--instance", instances[len(instances)-1].Name, "--reason", "dashboard test"},
	} {
		if r := clitest.Run(t, snipJobs, nil, append(args, "--config", instances[0].Config)...); r.Code != 0 {
			t.Fatalf("snip-jobs %s: exit %d\n%s%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
		}
	}
}

// query is one query of a panel.
type query struct {
	panel, ref, expr string
	instant          bool
}

// waitForData asks every query until each has returned data, failing at
// once on a query Prometheus refuses, and naming those still empty once
// benchtest.Patience has passed.
func waitForData(t *testing.T, prom *promtest.Server, queries []query, vars map[string]string, since time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	tick := time.NewTicker(scrapeInterval)
	defer tick.Stop()
	pending := queries
	for len(pending) > 0 {
		var still []query
		for _, q := range pending {
			now := time.Now()
			// A range shorter than a rate interval is no dashboard's; a
			// query that looks before the first scrape returns nothing yet.
			expr := substitute(t, q.expr, vars, max(now.Sub(since), 4*scrapeInterval))
			var r promtest.Result
			var err error
			if q.instant {
				r, err = prom.Query(ctx, expr, now)
			} else {
				r, err = prom.QueryRange(ctx, expr, since, now, scrapeInterval)
			}
			switch {
			case promtest.IsAPIError(err):
				t.Errorf("panel %q, query %s: Prometheus refuses it: %v\n%s", q.panel, q.ref, err, expr)
			case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
				still = append(still, q)
			case err != nil:
				t.Fatal(err)
			case r.Series == 0:
				still = append(still, q)
			}
		}
		pending = still
		if len(pending) == 0 || t.Failed() {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			for _, q := range pending {
				t.Errorf("panel %q, query %s returned no data within %v:\n%s", q.panel, q.ref, benchtest.Patience, q.expr)
			}
			return
		}
	}
}

// variables are the dashboard's query variables as Grafana substitutes
// them with All selected (their allValue), after checking that each one's
// label_values query finds values.
func variables(t *testing.T, d dashboard, prom *promtest.Server) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
		}
		var metric, label string
		if _, err := fmt.Sscanf(strings.NewReplacer("(", " ", ",", " ", ")", " ").Replace(q.Query), "label_values %s %s", &metric, &label); err != nil {
			t.Fatalf("variable %s: %q is not label_values(metric, label)", v.Name, q.Query)
		}
		benchtest.Eventually(t, "values of variable "+v.Name+" ("+q.Query+")", func() bool {
			vals, err := prom.LabelValues(context.Background(), label, metric)
			return err == nil && len(vals) > 0
		})
		var current []string
		if err := json.Unmarshal(v.Current.Value, &current); err != nil || !v.IncludeAll || v.AllValue == "" || len(current) != 1 || current[0] != "$__all" {
			t.Fatalf("variable %s: want All selected, with an allValue", v.Name)
		}
		vars[v.Name] = v.AllValue
	}
	return vars
}

// substitute replaces the variables in expr as Grafana does over a range of
// length rng: $__interval the range over Grafana's default 1000 points, at
// least the scrape interval; $__rate_interval the larger of $__interval
// plus the scrape interval and four scrape intervals; $__range the range.
func substitute(t *testing.T, expr string, vars map[string]string, rng time.Duration) string {
	t.Helper()
	interval := max(rng/1000, scrapeInterval).Round(time.Second)
	rate := max(interval+scrapeInterval, 4*scrapeInterval)
	secs := func(d time.Duration) string { return fmt.Sprintf("%ds", int(d/time.Second)) }
	pairs := []string{"$__rate_interval", secs(rate), "$__interval", secs(interval), "$__range", secs(rng.Truncate(time.Second))}
	for name, v := range vars {
		pairs = append(pairs, "${"+name+"}", v, "$"+name, v)
	}
	out := strings.NewReplacer(pairs...).Replace(expr)
	if strings.Contains(out, "$") {
		t.Fatalf("a variable is left in %q", out)
	}
	return out
}

// refuseAHeartbeatWrite makes the heartbeat leader's next fenced write be
// refused, as a newer term's write refuses an older term's in flight: a
// transaction takes the heartbeat's fencing row with the next token
// (snip_jobs_fence, the SQL fence for programs: the same rule on the same
// table), holds it until the leader's write waits for the row (its
// transaction names its token in application_name, " fence-token=N", and
// waits on a lock), and commits. The write, which began under the older
// token, then finds the newer one and is refused. (A write that begins
// after the commit is not refused but never made: the scheduler sees the
// newer token before the run and ends the term, counting no refusal.) If a
// newer term of the heartbeat is the one waiting, it would be let through:
// that attempt is rolled back and made again.
func refuseAHeartbeatWrite(t *testing.T, dbURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	holder, watcher := connect(t, dbURL), connect(t, dbURL)
	for ctx.Err() == nil {
		tx, err := holder.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var token int64
		err = tx.QueryRow(ctx, `SELECT token FROM fencing_tokens WHERE resource = 'heartbeat'`).Scan(&token)
		if err == nil {
			_, err = tx.Exec(ctx, `SELECT snip_jobs_fence('heartbeat', $1, 'dashboard-test')`, token+1)
		}
		if err == nil {
			if waiting := waitingWriter(ctx, watcher, holder.PgConn().PID()); waiting > 0 && waiting <= token {
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		// No row yet (no write yet), a newer term's write meanwhile, or a
		// newer term waiting: again.
		tx.Rollback(ctx)
		sleep.For(ctx, 100*time.Millisecond)
	}
	t.Fatalf("no heartbeat write waited for the fencing row within %v", benchtest.Patience)
}

// waitingWriter polls PostgreSQL's view of its backends until a fenced
// writer waits for a lock that backend holder holds, and returns its token
// (0 if ctx ends first).
// PostgreSQL signals no lock wait to another session: it must be polled.
func waitingWriter(ctx context.Context, watcher *pgx.Conn, holder uint32) int64 {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		var token int64
		err := watcher.QueryRow(ctx, `SELECT substring(application_name FROM ' fence-token=([0-9]+)$')::bigint FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid)) AND application_name ~ ' fence-token=[0-9]+$' LIMIT 1`, holder).Scan(&token)
		if err == nil {
			return token
		}
		if !sleep.For(ctx, 20*time.Millisecond) {
			return 0
		}
	}
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// seen waits until Prometheus has a sample of the series named name.
func seen(t *testing.T, prom *promtest.Server, name string) {
	t.Helper()
	benchtest.Eventually(t, name+" in Prometheus", func() bool {
		r, err := prom.Query(context.Background(), name, time.Now())
		return err == nil && r.Series > 0
	})
}
