package aggregator_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/aggregator"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

func TestMain(m *testing.M) {
	benchtest.MostlyWaiting(4) // terms, restarts and batches waited on; ~17 s of CPU in ~34 s
	os.Exit(benchtest.RunMain(m))
}

// patience bounds waits for things that must happen; it only decides how long
// a broken build takes to fail, never whether a healthy one passes.
const patience = 60 * time.Second

// links is how many links the tests' databases have: ids 1..links.
const links = 50

// db is one test's database with the real schema and links 1..links.
type db struct {
	t   testing.TB
	url string        // the superuser: the test's own reads and the producers
	job string        // the aggregators: the runtime role of docs/operations.md ("" = url)
	obs *pgxpool.Pool // the test's own reads and producers
}

// newDB is the test's database set up as docs/operations.md says
// (dbtest.NewDB): the test as the superuser, the aggregators connecting as
// the runtime role; with links 1..links.
func newDB(t testing.TB, roles dbtest.DB) *db {
	t.Helper()
	ctx := context.Background()
	d := &db{t: t, url: roles.Super, job: roles.Runtime}
	d.obs = d.pool("observer")
	if _, err := d.obs.Exec(ctx, `INSERT INTO links (id, slug) SELECT g, 'l' || g FROM generate_series(1, $1::int) g`, links); err != nil {
		t.Fatal(err)
	}
	return d
}

// pool returns a new pool whose connections carry application_name app.
func (d *db) pool(app string) *pgxpool.Pool {
	d.t.Helper()
	return d.poolOn(d.url, app)
}

// jobPool is pool as the aggregators' role.
func (d *db) jobPool(app string) *pgxpool.Pool {
	d.t.Helper()
	return d.poolOn(cmp.Or(d.job, d.url), app)
}

func (d *db) poolOn(url, app string) *pgxpool.Pool {
	d.t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		d.t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(p.Close)
	return p
}

// aggregatorJob is one running aggregator: a real job of the registered type,
// with a real fence on its own pool.
type aggregatorJob struct {
	token  int64
	valid  atomic.Bool
	cancel context.CancelFunc
	done   chan error // Run's result
	reg    *prometheus.Registry
	logs   *logRecorder
}

// startAggregator runs an aggregator with token on its own pool (application
// name "agg-<token>") until stop or the test's end.
func (d *db) startAggregator(token int64, opts aggregator.Options) *aggregatorJob {
	d.t.Helper()
	return d.startAggregatorOn(d.jobPool(fmt.Sprintf("agg-%d", token)), token, opts)
}

// startAggregatorOn is startAggregator on a given pool.
func (d *db) startAggregatorOn(pool *pgxpool.Pool, token int64, opts aggregator.Options) *aggregatorJob {
	d.t.Helper()
	a := &aggregatorJob{token: token, done: make(chan error, 1), reg: prometheus.NewRegistry(), logs: &logRecorder{}}
	a.valid.Store(true)
	instance := fmt.Sprintf("agg-%d", token)
	job, err := aggregator.Type().New(scheduler.Env{Instance: instance, Pool: pool, Metrics: a.reg}, configs.Job{
		Name: "aggregator", Type: "aggregator", Singleton: true,
		Schedule: configs.Schedule{Kind: configs.Continuous}, Options: jobtest.Options(d.t, opts),
	})
	if err != nil {
		d.t.Fatal(err)
	}
	run := scheduler.NewRun(scheduler.RunConfig{
		Job: "aggregator", Instance: instance, Token: token,
		Fence: fencing.New(pool, instance),
		Valid: a.valid.Load,
		Log:   slog.New(recordingHandler{benchtest.Logger(d.t).Handler(), a.logs}),
	})
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.done <- job.Run(ctx, run) }()
	d.t.Cleanup(func() {
		cancel()
		select {
		case <-a.done:
		case <-time.After(patience):
			d.t.Errorf("aggregator %d did not return within %v of its context's end", token, patience)
		}
	})
	return a
}

// stop cancels the aggregator's context and returns Run's result.
func (a *aggregatorJob) stop(t testing.TB) error {
	t.Helper()
	a.cancel()
	return a.wait(t)
}

// wait returns Run's result once it returns by itself.
func (a *aggregatorJob) wait(t testing.TB) error {
	t.Helper()
	select {
	case err := <-a.done:
		a.done <- err // later waits, and the cleanup, see it too
		return err
	case <-time.After(patience):
		t.Fatalf("aggregator %d still running after %v", a.token, patience)
		return nil
	}
}

// returned reports whether Run has returned, without waiting.
func (a *aggregatorJob) returned() bool {
	select {
	case err := <-a.done:
		a.done <- err
		return true
	default:
		return false
	}
}

// wantRunning fails if the aggregator's Run has returned.
func (a *aggregatorJob) wantRunning(t testing.TB) {
	t.Helper()
	select {
	case err := <-a.done:
		a.done <- err
		t.Fatalf("aggregator %d returned (%v) while it should keep running", a.token, err)
	default:
	}
}

// counter returns the value of a counter of the aggregator's registry (of a
// histogram: the sum of its samples), the sum over label values that match
// labels.
func (a *aggregatorJob) counter(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue() + m.GetHistogram().GetSampleSum()
		}
	}
	return sum
}

// event is one click as a producer inserts it.
type event struct {
	link      *int64 // nil: NULL
	clickedAt time.Time
	referrer  string
	country   *string // nil: NULL
}

func click(link int64, at time.Time) event {
	fr := "FR"
	return event{link: &link, clickedAt: at, referrer: "example.com", country: &fr}
}

// hourKey is one row of link_hourly_counts.
type hourKey struct {
	link int64
	hour int64 // unix seconds
}

// ledger is what producers committed: the counts the aggregator must reach.
type ledger struct {
	mu      sync.Mutex
	totals  map[int64]int64
	hourly  map[hourKey]int64
	rejects map[string]int64 // by reason
}

func newLedger() *ledger {
	return &ledger{totals: map[int64]int64{}, hourly: map[hourKey]int64{}, rejects: map[string]int64{}}
}

// add records committed events; reason is "" for valid ones.
func (l *ledger) add(evs []event, reasons []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, e := range evs {
		if reasons[i] != "" {
			l.rejects[reasons[i]]++
			continue
		}
		l.totals[*e.link]++
		l.hourly[hourKey{*e.link, e.clickedAt.Truncate(time.Hour).Unix()}]++
	}
}

func (l *ledger) events() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, c := range l.totals {
		n += c
	}
	for _, c := range l.rejects {
		n += c
	}
	return n
}

// insert inserts evs in tx, returning their ids.
func insert(ctx context.Context, tx pgx.Tx, evs []event) ([]int64, error) {
	ids := make([]int64, 0, len(evs))
	for _, e := range evs {
		var id int64
		err := tx.QueryRow(ctx, `INSERT INTO click_events (link_id, clicked_at, referrer_host, country)
			VALUES ($1, $2, $3, $4) RETURNING id`, e.link, e.clickedAt, e.referrer, e.country).Scan(&id)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// commit inserts evs in one transaction and records them in l.
func (d *db) commit(l *ledger, evs []event, reasons []string) []int64 {
	d.t.Helper()
	var ids []int64
	err := pgx.BeginFunc(context.Background(), d.obs, func(tx pgx.Tx) error {
		var err error
		ids, err = insert(context.Background(), tx, evs)
		return err
	})
	if err != nil {
		d.t.Fatal(err)
	}
	l.add(evs, reasons)
	return ids
}

// events counts the rows of click_events.
func (d *db) events() int {
	d.t.Helper()
	var n int
	if err := d.obs.QueryRow(context.Background(), `SELECT count(*) FROM click_events`).Scan(&n); err != nil {
		d.t.Fatal(err)
	}
	return n
}

// state is the aggregator's bookkeeping row.
type state struct {
	prev             string
	folded, rejected int64
	token            int64
}

func (d *db) state() state {
	d.t.Helper()
	var s state
	err := d.obs.QueryRow(context.Background(), `SELECT prev::text, folded, rejected, token FROM click_aggregator_state`).
		Scan(&s.prev, &s.folded, &s.rejected, &s.token)
	if err != nil {
		d.t.Fatal(err)
	}
	return s
}

// waitProcessed waits until the aggregator has processed (counted or
// rejected) n events, then until two more windows have passed (so that a
// double count would have had its chance), and fails if it processes more.
func (d *db) waitProcessed(n int64) {
	d.t.Helper()
	d.waitState(fmt.Sprintf("the aggregator to process the %d committed events", n), func() bool {
		s := d.state()
		if s.folded+s.rejected > n {
			d.t.Fatalf("aggregator processed %d events (%d counted, %d rejected); only %d were committed", s.folded+s.rejected, s.folded, s.rejected, n)
		}
		return s.folded+s.rejected == n
	})
	d.waitCaughtUp()
	if s := d.state(); s.folded+s.rejected != n {
		d.t.Fatalf("aggregator processed %d events after it had reached the %d committed", s.folded+s.rejected, n)
	}
}

// waitCaughtUp waits until the aggregator's position covers every committed
// event: no window in progress, and every event's transaction visible in its
// prev snapshot. From then on it has nothing to fold, and opens no batch,
// until an event commits.
func (d *db) waitCaughtUp() {
	d.t.Helper()
	// Only a commit of the aggregator's position can make this true (events
	// committing can only make it false): the wait is woken by those.
	d.waitState("the aggregator's position to cover every committed event", func() bool {
		var done bool
		err := d.obs.QueryRow(context.Background(), `SELECT target IS NULL AND NOT EXISTS (
			SELECT FROM click_events e WHERE NOT pg_visible_in_snapshot(e.txid, s.prev)) FROM click_aggregator_state s`).Scan(&done)
		if err != nil {
			d.t.Fatal(err)
		}
		return done
	})
}

// waitIdlePolls waits until a has looked for work and found none k more
// times.
func (a *aggregatorJob) waitIdlePolls(t testing.TB, k int) {
	t.Helper()
	const name = "snip_aggregator_idle_polls_total"
	want := a.counter(t, name, nil) + float64(k)
	benchtest.Eventually(t, fmt.Sprintf("the aggregator to find nothing to do %d more times", k), func() bool {
		return a.counter(t, name, nil) >= want
	})
}

// waitFolded waits until the aggregator has counted at least n events.
func (d *db) waitFolded(n int64) {
	d.t.Helper()
	d.waitState(fmt.Sprintf("%d events counted", n), func() bool { return d.state().folded >= n })
}

// waitState waits until cond holds, woken by each commit of the aggregator's
// position (click_aggregator_state): PostgreSQL signals, the test does not
// poll. The producers' tables get no trigger: a NOTIFY serialises commits,
// and the events' commit order is what the aggregator must get right.
func (d *db) waitState(what string, cond func() bool) {
	d.t.Helper()
	dbtest.WaitCommit(d.t, d.url, what, []string{"click_aggregator_state"}, cond)
}

// wantCounts checks link_counts, link_hourly_counts and click_rejects against
// the ledger, exactly.
func (d *db) wantCounts(l *ledger) {
	d.t.Helper()
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()

	totals := map[int64]int64{}
	rows, _ := d.obs.Query(ctx, `SELECT link_id, clicks FROM link_counts`)
	var link, clicks int64
	if _, err := pgx.ForEachRow(rows, []any{&link, &clicks}, func() error { totals[link] = clicks; return nil }); err != nil {
		d.t.Fatal(err)
	}
	if !maps.Equal(totals, l.totals) {
		d.t.Errorf("link_counts:\n got %v\nwant %v", totals, l.totals)
	}

	hourly := map[hourKey]int64{}
	rows, _ = d.obs.Query(ctx, `SELECT link_id, extract(epoch FROM hour)::bigint, clicks FROM link_hourly_counts`)
	var hour int64
	if _, err := pgx.ForEachRow(rows, []any{&link, &hour, &clicks}, func() error { hourly[hourKey{link, hour}] = clicks; return nil }); err != nil {
		d.t.Fatal(err)
	}
	if !maps.Equal(hourly, l.hourly) {
		d.t.Errorf("link_hourly_counts:\n got %v\nwant %v", hourly, l.hourly)
	}

	rejects := map[string]int64{}
	rows, _ = d.obs.Query(ctx, `SELECT reason, count(*) FROM click_rejects GROUP BY reason`)
	var reason string
	if _, err := pgx.ForEachRow(rows, []any{&reason, &clicks}, func() error { rejects[reason] = clicks; return nil }); err != nil {
		d.t.Fatal(err)
	}
	if !maps.Equal(rejects, l.rejects) {
		d.t.Errorf("click_rejects by reason:\n got %v\nwant %v", rejects, l.rejects)
	}
}

// waitLockWait returns the pid of the backend of application app in this
// test's database that is waiting for a lock, waiting until there is one.
// Other tests in the shared cluster run aggregators of the same name.
func (d *db) waitLockWait(app string) int32 {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for {
		var pid int32
		err := d.obs.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND split_part(application_name, ' fence-token=', 1) = $1 AND wait_event_type = 'Lock'`, app).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			d.t.Fatalf("waiting for %s to wait for a lock: %v", app, err)
		}
		select {
		case <-ctx.Done():
			d.t.Fatalf("%s never waited for a lock within %v", app, patience)
		case <-time.After(time.Millisecond):
		}
	}
}

func ptr[T any](v T) *T { return &v }

// logRecorder keeps the level and message of every record an aggregator
// logs, debug ones included.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

// count returns how many records at level have a message containing s.
func (r *logRecorder) count(level slog.Level, s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if rec.Level == level && strings.Contains(rec.Message, s) {
			n++
		}
	}
	return n
}

// atLeast returns the messages of the records at level or above.
func (r *logRecorder) atLeast(level slog.Level) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var msgs []string
	for _, rec := range r.records {
		if rec.Level >= level {
			msgs = append(msgs, rec.Level.String()+" "+rec.Message)
		}
	}
	return msgs
}

// recordingHandler records every record in rec and passes those its
// handler wants on to it.
type recordingHandler struct {
	slog.Handler
	rec *logRecorder
}

func (h recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recordingHandler) Handle(ctx context.Context, r slog.Record) error {
	h.rec.mu.Lock()
	h.rec.records = append(h.rec.records, r.Clone())
	h.rec.mu.Unlock()
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h recordingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return recordingHandler{h.Handler.WithAttrs(attrs), h.rec}
}

func (h recordingHandler) WithGroup(name string) slog.Handler {
	return recordingHandler{h.Handler.WithGroup(name), h.rec}
}
