package aggregator_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/jobs/aggregator"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// The benchmarks run on a private cluster (fsync and synchronous_commit off,
// as every test cluster) with shared_buffers raised to 1 GB, so that the
// 2 M-event backlog and its index stay in PostgreSQL's own cache instead of
// the OS's, and max_wal_size to 4 GB, so that no checkpoint falls in a run.
//
//	go test ./jobs/aggregator -run '^$' -bench Backlog -benchtime 1x -timeout 30m
//	go test ./jobs/aggregator -run '^$' -bench BacklogRejects -benchtime 1x -timeout 30m
//	go test ./jobs/aggregator -run '^$' -bench Live -benchtime 1x -timeout 30m

const (
	backlogEvents = 2_000_000
	viralShare    = 0.8    // of the events are on link 1
	otherLinks    = 10_000 // links 2..10001 share the rest
	eventsPerTx   = 1000   // a producer's transaction (one multi-row insert or COPY)
	probeLinks    = 100001 // the first of 10 000 links that only probes click
	unknownLinks  = 500001 // the first of 1 000 link ids that are not in links
)

// benchDB starts a private cluster tuned as above and returns a database with
// the schema and links 1..10001 (and probe links from probeLinks on).
func benchDB(b *testing.B) *db {
	b.Helper()
	ctx := context.Background()
	pg := benchtest.StartPostgres(b)
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range []string{
		`ALTER SYSTEM SET shared_buffers = '1GB'`,
		`ALTER SYSTEM SET max_wal_size = '4GB'`, // no checkpoint in the middle of a run
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	conn.Close(ctx)
	pg.Restart(b)

	d := &db{t: b, url: dbtest.Migrate(b, pg.CreateDatabase(b))}
	d.obs = d.pool("observer")
	if _, err := d.obs.Exec(ctx, `INSERT INTO links (id, slug) SELECT g, 'l' || g FROM generate_series(1, $1::int) g`, otherLinks+1); err != nil {
		b.Fatal(err)
	}
	if _, err := d.obs.Exec(ctx, `INSERT INTO links (id, slug) SELECT g, 'probe' || g FROM generate_series($1::bigint, $1::bigint + 9999) g`, probeLinks); err != nil {
		b.Fatal(err)
	}
	return d
}

// reset empties the events, counts and the aggregator's state.
func (d *db) reset(b *testing.B) {
	b.Helper()
	for _, s := range []string{
		`TRUNCATE click_events, link_counts, link_hourly_counts, click_rejects, click_aggregator_horizons`,
		`UPDATE click_aggregator_state SET prev = pg_current_snapshot(), target = NULL, cursor_txid = NULL, folded = 0, rejected = 0, unpruned = 0`,
	} {
		if _, err := d.obs.Exec(context.Background(), s); err != nil {
			b.Fatalf("%s: %v", s, err)
		}
	}
}

// loadBacklog resets the database, then commits backlogEvents events in transactions of eventsPerTx (each its own
// transaction id, as producers' would be), clicked within the last hour, and
// VACUUMs so that every reader finds the same clean pages.
func (d *db) loadBacklog(b *testing.B) { d.loadBacklogWith(b, 0) }

// loadBacklogWith is loadBacklog with a share of the events, spread evenly,
// on one of 1 000 links that do not exist.
func (d *db) loadBacklogWith(b *testing.B, unknownShare float64) {
	b.Helper()
	d.reset(b)
	ctx := context.Background()
	for _, s := range []string{
		fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP
			INSERT INTO click_events (link_id, clicked_at, referrer_host, country)
			SELECT CASE WHEN random() < %v THEN %d + floor(random() * 1000)::bigint
				WHEN random() < %v THEN 1 ELSE 2 + floor(random() * %d)::bigint END,
				now() - random() * interval '1 hour', 'news.example.com', 'FR'
			FROM generate_series(1, %d);
			COMMIT;
		END LOOP; END $$`, backlogEvents/eventsPerTx, unknownShare, unknownLinks, viralShare, otherLinks, eventsPerTx),
		`VACUUM ANALYZE click_events`,
		`CHECKPOINT`,
	} {
		if _, err := d.obs.Exec(ctx, s); err != nil {
			b.Fatalf("%s: %v", s, err)
		}
	}
}

// BenchmarkBacklog folds a backlog of 2 M events with the job, for several
// batch sizes, and measures side by side the database's plain GROUP BY over
// the same rows (the practical limit of a fold that reads every event).
func BenchmarkBacklog(b *testing.B) {
	d := benchDB(b)
	d.loadBacklog(b)
	jobPool := d.warmPool(b)

	b.Run("groupby", func(b *testing.B) {
		for range b.N {
			b.ReportMetric(bestOf(groupByRound, b, d.obs, true), "events/s")
			b.ReportMetric(bestOf(groupByRound, b, d.obs, false), "serial-events/s")
		}
	})

	var token int64 // each run's terms are newer than the last's
	for _, size := range []int{100_000, 1_000_000, 4_000_000} {
		b.Run(fmt.Sprintf("job-batch=%d", size), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				d.loadBacklog(b)
				opts := aggregator.DefaultOptions()
				opts.BatchSize = size
				d.foldRounds(b, jobPool, opts, &token)

				// Then the pruning of the processed backlog, with retention 0.
				opts.Retention = 0
				start := time.Now()
				token++
				pruner := d.startAggregatorOn(jobPool, token, opts)
				d.waitPruned(10 * time.Minute)
				b.ReportMetric(backlogEvents/time.Since(start).Seconds(), "pruned-events/s")
				pruner.stop(b)
			}
		})
	}
}

// BenchmarkBacklogRejects is the default batch size of BenchmarkBacklog over
// a backlog with one event in a thousand on an unknown link, spread evenly:
// every batch has rejects, so every batch also runs its reject statement over
// its range. Side by side, the plain GROUP BY over the same rows.
func BenchmarkBacklogRejects(b *testing.B) {
	const unknownShare = 0.001
	d := benchDB(b)
	jobPool := d.warmPool(b)
	var token int64
	for range b.N {
		b.StopTimer()
		d.loadBacklogWith(b, unknownShare)
		d.foldRounds(b, jobPool, aggregator.DefaultOptions(), &token)
	}
}

// foldRounds measures the job against the plain GROUP BY over the loaded
// backlog, three rounds of each, alternated: each round of the job folds the
// whole backlog again, from the position it started from, with a new term. It
// reports the best round of each, and their ratio: the machine is shared and
// noisy, and the best of three is what each can do when it is left alone.
// Every round's counts are checked.
func (d *db) foldRounds(b *testing.B, jobPool *pgxpool.Pool, opts aggregator.Options, token *int64) {
	b.Helper()
	opts.Retention = time.Hour      // measure the fold; pruning is measured on its own
	groupByRound(b, jobPool, false) // warms the job's connection and brings the rows into shared_buffers
	var from string                 // the position before the backlog: refold goes back to it
	if err := d.obs.QueryRow(context.Background(), `SELECT prev::text FROM click_aggregator_state`).Scan(&from); err != nil {
		b.Fatal(err)
	}
	var bestJob, bestPlain, bestHonest, batchSeconds, batches, rejected float64
	for range 3 {
		bestPlain = max(bestPlain, groupByRound(b, d.obs, true))
		d.refold(b, from)
		bestHonest = max(bestHonest, d.upsertRound(b, jobPool))
		d.refold(b, from)
		*token++
		b.StartTimer()
		start := time.Now()
		a := d.startAggregatorOn(jobPool, *token, opts)
		d.waitProcessedWithin(a, backlogEvents, 10*time.Minute)
		elapsed := time.Since(start)
		b.StopTimer()
		if rate := backlogEvents / elapsed.Seconds(); rate > bestJob {
			bestJob = rate
			batchSeconds = a.counter(b, "snip_aggregator_batch_duration_seconds", nil)
			batches = a.counter(b, "snip_aggregator_batches_total", nil)
			rejected = a.counter(b, "snip_aggregator_events_rejected_total", nil)
		}
		a.stop(b)
		d.wantBacklogCounts(b)
	}
	b.ReportMetric(bestJob, "events/s")
	b.ReportMetric(batchSeconds, "batch-s")
	b.ReportMetric(batches, "batches")
	b.ReportMetric(rejected, "rejected")
	b.ReportMetric(bestPlain, "groupby-events/s")
	b.ReportMetric(100*bestJob/bestPlain, "%-of-groupby")
	b.ReportMetric(bestHonest, "upsert-events/s")
	b.ReportMetric(100*bestJob/bestHonest, "%-of-upsert")
}

// upsertSQL is the fold's work without its safety: the counts per link and
// hour, by the stored hour column, and the totals per link, upserted from one
// scan of every event, in one statement. No position, no validity checks, no
// rejects, no fence: what a fold that trusted every row and ran alone could do.
const upsertSQL = `WITH agg AS MATERIALIZED (
	SELECT link_id, hour, count(*) AS clicks FROM click_events GROUP BY link_id, hour
), hourly AS (
	INSERT INTO link_hourly_counts AS h (link_id, hour, clicks)
	SELECT link_id, hour, clicks FROM agg ORDER BY link_id, hour
	ON CONFLICT (link_id, hour) DO UPDATE SET clicks = h.clicks + EXCLUDED.clicks
), totals AS (
	INSERT INTO link_counts AS c (link_id, clicks)
	SELECT link_id, sum(clicks) FROM agg GROUP BY link_id ORDER BY link_id
	ON CONFLICT (link_id) DO UPDATE SET clicks = c.clicks + EXCLUDED.clicks, updated_at = now()
)
SELECT coalesce(sum(clicks), 0)::bigint FROM agg`

// upsertRound is one serial transaction of upsertSQL on the job's warm
// connection, into the emptied counts (as each round of the job folds into
// them), in events per second.
func (d *db) upsertRound(b *testing.B, pool *pgxpool.Pool) float64 {
	b.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET max_parallel_workers_per_gather = 0; SET work_mem = '64MB'`); err != nil { // the batch's work_mem
		b.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET max_parallel_workers_per_gather; RESET work_mem`)
	var n int64
	start := time.Now()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return tx.QueryRow(ctx, upsertSQL).Scan(&n) })
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if n != backlogEvents {
		b.Fatalf("the upsert counted %d events, want %d", n, backlogEvents)
	}
	return backlogEvents / took.Seconds()
}

// refold empties the counts and the rejects and moves the aggregator's
// position back to prev, taken before the backlog was loaded, so that the
// next aggregator folds the whole backlog again, in batches sized as the
// first time: from '1:1:' its first range would be every transaction id the
// cluster ever gave, nearly all without events.
func (d *db) refold(b *testing.B, prev string) {
	b.Helper()
	ctx := context.Background()
	if _, err := d.obs.Exec(ctx, `TRUNCATE link_counts, link_hourly_counts, click_rejects, click_aggregator_horizons`); err != nil {
		b.Fatal(err)
	}
	if _, err := d.obs.Exec(ctx, `UPDATE click_aggregator_state SET prev = $1::text::pg_snapshot, target = NULL, cursor_txid = NULL,
		folded = 0, rejected = 0, unpruned = 0, refused_prev = NULL, target_max_id = NULL`, prev); err != nil {
		b.Fatal(err)
	}
}

// warmPool is the job's pool, which lives across runs as a server's does,
// with one connection: the job uses one at a time, always the warm one. A
// backend's first scan of the table is about twice as slow as the next ones
// (it maps the shared buffers' pages into its address space), so each run
// first reads the rows through it, as a long-running job's connection would
// have before.
func (d *db) warmPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// bestOf is the best of three rounds of f, in events per second.
func bestOf(f func(*testing.B, *pgxpool.Pool, bool) float64, b *testing.B, pool *pgxpool.Pool, parallel bool) float64 {
	var best float64
	for range 3 {
		best = max(best, f(b, pool, parallel))
	}
	return best
}

// groupByRound is one plain GROUP BY of the events by link (in parallel or
// not), in events per second. Parallel workers are new processes, which pay
// the same first-scan cost as a new backend: on the test machines parallel
// and serial run about as fast.
func groupByRound(b *testing.B, pool *pgxpool.Pool, parallel bool) float64 {
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	workers := "0"
	if parallel {
		workers = "2"
	}
	if _, err := conn.Exec(ctx, `SET max_parallel_workers_per_gather = `+workers); err != nil {
		b.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET max_parallel_workers_per_gather`)
	start := time.Now()
	rows, _ := conn.Query(ctx, `SELECT link_id, count(*) FROM click_events GROUP BY link_id`)
	var n int
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	if n < otherLinks+1 {
		b.Fatalf("GROUP BY returned %d links, want at least the %d known ones", n, otherLinks+1)
	}
	return backlogEvents / took.Seconds()
}

// BenchmarkIdle measures, at PostgreSQL, what the aggregator writes once it
// has caught up and no click event arrives: over 60 s, the write
// transactions (transaction ids assigned: the current snapshot's xmax moves
// by one for each, cluster-wide), the WAL bytes (pg_current_wal_insert_lsn;
// the records are logged by kind, from pg_walinspect), and the rows
// inserted, updated or deleted (pg_stat_user_tables). Side by side,
// alternated, the same window without an aggregator: what the cluster does by
// itself (autovacuum off, so that it does not analyze other databases'
// catalogs meanwhile). The job runs at its default options (a look for work
// every 100 ms).
//
//	go test ./jobs/aggregator -run '^$' -bench Idle -benchtime 1x -timeout 30m
func BenchmarkIdle(b *testing.B) {
	const window = 60 * time.Second
	d := benchDB(b)
	d.reset(b)
	l := newLedger()
	now := time.Now()
	for i := range 1000 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}
	// Nothing else writes in the windows: autovacuum, which would analyze and
	// vacuum the catalogs of the cluster's other databases, is off for them.
	d.setSystem(b, "autovacuum", "off")
	defer d.setSystem(b, "autovacuum", "on")
	var token int64
	for range b.N {
		for _, withJob := range []bool{false, true} {
			name := "no-aggregator"
			var a *aggregatorJob
			if withJob {
				name = "aggregator"
				token++
				a = d.startAggregator(token, aggregator.DefaultOptions())
				d.waitProcessed(l.events())
				d.waitPruned(time.Minute)
			}
			d.vacuum(b)                  // nothing left for autovacuum in the window
			time.Sleep(11 * time.Second) // idle backends report their statistics within 10 s
			before := d.writes(b)
			polls := a.idlePolls(b)
			time.Sleep(window)
			after := d.writes(b)
			b.ReportMetric(float64(after.xids-before.xids), name+"-write-xacts")
			b.ReportMetric(d.walBytes(b, before.lsn, after.lsn), name+"-wal-bytes")
			b.ReportMetric(float64(after.rows-before.rows), name+"-rows-written")
			b.Logf("%s: WAL records in the window: %s", name, d.walRecords(b, before.lsn, after.lsn))
			if a != nil {
				b.ReportMetric(a.idlePolls(b)-polls, "aggregator-idle-polls")
				a.stop(b)
			}
		}
	}
	b.ReportMetric(0, "ns/op")
}

// writeCounters are PostgreSQL's counts of writes, at one moment.
type writeCounters struct {
	xids int64  // the next transaction id: ids are assigned to writing transactions only
	lsn  string // WAL insert position
	rows int64  // rows inserted, updated and deleted in this database's tables
}

func (d *db) writes(b *testing.B) writeCounters {
	b.Helper()
	var w writeCounters
	if err := d.obs.QueryRow(context.Background(), `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
		pg_current_wal_insert_lsn()::text, (SELECT sum(n_tup_ins + n_tup_upd + n_tup_del) FROM pg_stat_user_tables)::bigint`).
		Scan(&w.xids, &w.lsn, &w.rows); err != nil {
		b.Fatal(err)
	}
	return w
}

// setSystem sets a server parameter for the whole cluster, at once.
func (d *db) setSystem(b *testing.B, name, value string) {
	b.Helper()
	ctx := context.Background()
	if _, err := d.obs.Exec(ctx, fmt.Sprintf(`ALTER SYSTEM SET %s = '%s'`, name, value)); err != nil {
		b.Fatal(err)
	}
	if _, err := d.obs.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		b.Fatal(err)
	}
}

// walRecords describes the WAL records between two positions: count and
// bytes by resource manager, record type and relation (pg_walinspect).
func (d *db) walRecords(b *testing.B, from, to string) string {
	b.Helper()
	ctx := context.Background()
	if _, err := d.obs.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		b.Fatal(err)
	}
	rows, err := d.obs.Query(ctx, `SELECT format('%s/%s %s: %s records, %s bytes', rm, rt, rel, count(*), sum(len))
		FROM (SELECT resource_manager AS rm, record_type AS rt, coalesce(substring(block_ref from 'rel [0-9/]+'), '-') AS rel,
			record_length AS len
			FROM pg_get_wal_records_info($1::text::pg_lsn, least($2::text::pg_lsn, pg_current_wal_flush_lsn()))) r
		GROUP BY rm, rt, rel ORDER BY sum(len) DESC`, from, to)
	if err != nil {
		b.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	return strings.Join(lines, "; ")
}

func (d *db) walBytes(b *testing.B, from, to string) float64 {
	b.Helper()
	var n float64
	if err := d.obs.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff($2::text::pg_lsn, $1::text::pg_lsn)`, from, to).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// vacuum leaves nothing for autovacuum, nor for a reader to prune: ANALYZE
// first, since it leaves dead versions of pg_statistic's rows, which the
// first query to be planned afterwards would prune (writing WAL), then VACUUM.
func (d *db) vacuum(b *testing.B) {
	b.Helper()
	for _, s := range []string{`ANALYZE`, `VACUUM`, `CHECKPOINT`} {
		if _, err := d.obs.Exec(context.Background(), s); err != nil {
			b.Fatal(err)
		}
	}
}

// idlePolls is the aggregator's count of looks that found nothing (0 for
// no aggregator).
func (a *aggregatorJob) idlePolls(b *testing.B) float64 {
	if a == nil {
		return 0
	}
	return a.counter(b, "snip_aggregator_idle_polls_total", nil)
}

// BenchmarkBacklogNaive counts events the naive way: one statement per event
// adding 1 to its link's total and hour (no exactly-once bookkeeping at all),
// over the first 200 000 events of the same backlog.
func BenchmarkBacklogNaive(b *testing.B) {
	const events = 200_000
	d := benchDB(b)
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		d.loadBacklog(b)
		b.StartTimer()
		start := time.Now()
		var done int
		var lastTxid uint64
		var lastID int64
		type ev struct {
			Txid uint64
			ID   int64
			Link int64
			Hour time.Time
		}
		for done < events {
			rows, err := d.obs.Query(ctx, `SELECT txid, id, link_id, hour FROM click_events
				WHERE (txid, id) > ($1, $2) ORDER BY txid, id LIMIT 1000`, lastTxid, lastID)
			if err != nil {
				b.Fatal(err)
			}
			evs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ev])
			if err != nil {
				b.Fatal(err)
			}
			lastTxid, lastID = evs[len(evs)-1].Txid, evs[len(evs)-1].ID
			err = pgx.BeginFunc(ctx, d.obs, func(tx pgx.Tx) error {
				for _, e := range evs {
					if _, err := tx.Exec(ctx, `WITH t AS (
						INSERT INTO link_counts AS c (link_id, clicks) VALUES ($1, 1)
						ON CONFLICT (link_id) DO UPDATE SET clicks = c.clicks + 1)
					INSERT INTO link_hourly_counts AS h (link_id, hour, clicks) VALUES ($1, $2, 1)
					ON CONFLICT (link_id, hour) DO UPDATE SET clicks = h.clicks + 1`, e.Link, e.Hour); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			done += len(evs)
		}
		b.ReportMetric(float64(done)/time.Since(start).Seconds(), "events/s")
	}
}

// BenchmarkLive runs producers at a given rate (4 connections, each a
// 1000-row COPY at even intervals) with the job folding at its default
// options, and measures for probe events (one every 20 ms, each on a link of
// its own) the delay from their commit returning to their count being
// visible, polled every 5 ms. First, for scale, the same producers as fast as
// they can with no aggregator: what this machine can insert at all.
func BenchmarkLive(b *testing.B) {
	const (
		producers = 4
		warmup    = 3 * time.Second
		measure   = 30 * time.Second
	)
	d := benchDB(b)
	b.Run("producers-only", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			d.reset(b)
			stop := make(chan struct{})
			var inserted atomic.Int64
			var wg sync.WaitGroup
			ppool := d.pool("producers")
			for p := range producers {
				wg.Go(func() { produce(b, ppool, p, 0, stop, &inserted) })
			}
			time.Sleep(warmup)
			b.StartTimer()
			start, before := time.Now(), inserted.Load()
			time.Sleep(measure / 3)
			elapsed, after := time.Since(start), inserted.Load()
			b.StopTimer()
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(after-before)/elapsed.Seconds(), "inserted-events/s")
		}
	})
	var token int64
	for _, rate := range []int{50_000, 100_000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				d.reset(b)
				token++
				a := d.startAggregator(token, aggregator.DefaultOptions())
				stop := make(chan struct{})
				var inserted atomic.Int64
				var wg sync.WaitGroup
				ppool := d.pool("producers")
				for p := range producers {
					wg.Go(func() { produce(b, ppool, p, rate/producers, stop, &inserted) })
				}
				time.Sleep(warmup)
				b.StartTimer()

				start, before := time.Now(), inserted.Load()
				delays := probe(b, d.obs, measure)
				elapsed, after := time.Since(start), inserted.Load()
				b.StopTimer()
				close(stop)
				wg.Wait()
				a.stop(b)

				slices.Sort(delays)
				q := func(p float64) float64 { return float64(delays[int(p*float64(len(delays)-1))].Microseconds()) / 1000 }
				b.ReportMetric(float64(after-before)/elapsed.Seconds(), "inserted-events/s")
				b.ReportMetric(q(0.5), "p50-ms")
				b.ReportMetric(q(0.99), "p99-ms")
				b.ReportMetric(q(1), "max-ms")
				b.ReportMetric(float64(len(delays)), "probes")
			}
		})
	}
}

// produce inserts COPYs of 1000 events at perSecond events per second until
// stop closes. The COPYs are due at even instants from the start; one that is
// late (the previous took longer than the interval) goes at once, so the rate
// holds on average whenever the machine can sustain it. With perSecond 0 it
// inserts as fast as it can.
func produce(b *testing.B, pool *pgxpool.Pool, p, perSecond int, stop <-chan struct{}, inserted *atomic.Int64) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(uint64(p), 7))
	rows := make([][]any, eventsPerTx)
	next := func() bool { // the next COPY, unless stop closed
		select {
		case <-stop:
			return false
		default:
			return true
		}
	}
	if perSecond > 0 {
		every := time.Second * eventsPerTx / time.Duration(perSecond)
		due := time.Now()
		next = func() bool {
			due = due.Add(every)
			wait := time.NewTimer(time.Until(due))
			defer wait.Stop()
			select {
			case <-stop:
				return false
			case <-wait.C:
				return true
			}
		}
	}
	for next() {
		now := time.Now()
		for i := range rows {
			link := int64(1)
			if r.Float64() >= viralShare {
				link = 2 + r.Int64N(otherLinks)
			}
			rows[i] = []any{link, now, "news.example.com", "FR"}
		}
		n, err := pool.CopyFrom(ctx, pgx.Identifier{"click_events"}, []string{"link_id", "clicked_at", "referrer_host", "country"}, pgx.CopyFromRows(rows))
		if err != nil {
			b.Error(err)
			return
		}
		inserted.Add(n)
	}
}

// probe commits one event every 20 ms for a probe link of its own (nobody
// else clicks it), for the given time, and returns for each the delay from
// its commit's return to its count being visible, polled every 5 ms.
func probe(b *testing.B, pool *pgxpool.Pool, measure time.Duration) []time.Duration {
	ctx := context.Background()
	var mu sync.Mutex
	pending := map[int64]time.Time{} // link → commit returned
	var delays []time.Duration
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // poller
		for {
			mu.Lock()
			links := slices.Collect(maps.Keys(pending))
			mu.Unlock()
			if len(links) > 0 {
				rows, _ := pool.Query(ctx, `SELECT link_id FROM link_counts WHERE link_id = ANY ($1)`, links)
				seen, err := pgx.CollectRows(rows, pgx.RowTo[int64])
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				for _, l := range seen {
					delays = append(delays, now.Sub(pending[l]))
					delete(pending, l)
				}
				mu.Unlock()
			}
			select {
			case <-done:
				mu.Lock()
				defer mu.Unlock()
				if len(pending) > 0 {
					b.Errorf("%d probes not counted within %v", len(pending), patience)
				}
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	start := time.Now()
	for link := int64(probeLinks); time.Since(start) < measure; link++ {
		if _, err := pool.Exec(ctx, `INSERT INTO click_events (link_id, clicked_at) VALUES ($1, now())`, link); err != nil {
			b.Fatal(err)
		}
		mu.Lock()
		pending[link] = time.Now()
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	// Wait for the last ones.
	deadline := time.Now().Add(patience)
	for {
		mu.Lock()
		n := len(pending)
		mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(done)
	wg.Wait()
	return delays
}

// waitProcessedWithin waits until the aggregator a has counted or rejected n
// events.
func (d *db) waitProcessedWithin(a *aggregatorJob, n int64, limit time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	processed := func() int64 { s := d.state(); return s.folded + s.rejected }
	for processed() < n {
		select {
		case err := <-a.done:
			d.t.Fatalf("aggregator returned %v before processing %d events", err, n)
		default:
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%d of %d events processed within %v", processed(), n, limit)
		}
		time.Sleep(10 * time.Millisecond) // coarse: polling must not compete for the two cores
	}
}

// waitPruned waits until the aggregator has deleted every processed event.
func (d *db) waitPruned(limit time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var left int64
		if err := d.obs.QueryRow(context.Background(), `SELECT unpruned FROM click_aggregator_state`).Scan(&left); err != nil {
			d.t.Fatal(err)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%d processed events still in click_events after %v", left, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantBacklogCounts checks that the counts equal a GROUP BY of the events
// on known links, and that every other event is rejected as unknown_link.
func (d *db) wantBacklogCounts(b *testing.B) {
	b.Helper()
	var wrong, total, rejected, unknown int64
	err := d.obs.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM (
			SELECT link_id, hour, count(*) AS clicks FROM click_events e
			WHERE EXISTS (SELECT FROM links l WHERE l.id = e.link_id) GROUP BY 1, 2
			EXCEPT SELECT link_id, hour, clicks FROM link_hourly_counts) x),
		(SELECT coalesce(sum(clicks), 0) FROM link_counts)::bigint,
		(SELECT count(*) FROM click_rejects WHERE reason = 'unknown_link'),
		(SELECT count(*) FROM click_events e WHERE NOT EXISTS (SELECT FROM links l WHERE l.id = e.link_id))`).
		Scan(&wrong, &total, &rejected, &unknown)
	if err != nil {
		b.Fatal(err)
	}
	if wrong != 0 || total+rejected != backlogEvents || rejected != unknown {
		b.Fatalf("after the fold: %d hourly counts differ from the events, total %d and %d rejected (of %d on unknown links), want %d in all",
			wrong, total, rejected, unknown, backlogEvents)
	}
}
