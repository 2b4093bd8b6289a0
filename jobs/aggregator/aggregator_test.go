package aggregator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/aggregator"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// small makes batches of a few events, so that every test goes through many
// batches, ranges and windows.
func small() aggregator.Options {
	o := aggregator.DefaultOptions()
	o.BatchSize = 7
	o.Interval = 5 * time.Millisecond
	return o
}

func TestAnEventCommittedAfterHigherIdsIsCountedOnceWhenItCommits(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	l := newLedger()
	now := time.Now()
	d.startAggregator(1, small())

	// The low id: inserted first, committed last.
	ctx := context.Background()
	low, err := d.obs.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer low.Rollback(ctx)
	lowEvents := []event{click(1, now), click(2, now)}
	lowIDs, err := insert(ctx, low, lowEvents)
	if err != nil {
		t.Fatal(err)
	}

	// Higher ids commit and are counted while the low one is still open.
	var n int
	for i := range 20 {
		ids := d.commit(l, []event{click(int64(3+i%5), now)}, []string{""})
		if ids[0] <= lowIDs[1] {
			t.Fatalf("id %d committed after the open transaction's %d: not out of order", ids[0], lowIDs[1])
		}
		n++
	}
	d.waitProcessed(int64(n))
	d.wantCounts(l)

	if err := low.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	l.add(lowEvents, []string{"", ""})
	d.waitProcessed(int64(n + len(lowEvents)))
	d.wantCounts(l)
}

// Idle means idle: once every committed event is counted and deleted, the
// aggregator only reads, and writes nothing (neither its fencing token's row nor its
// position's) however often it looks, until an event commits; then it counts
// it at once.
func TestAnIdleAggregatorWritesNothingUntilAnEventCommits(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	l := newLedger()
	now := time.Now()
	a := d.startAggregator(1, small())
	for i := range 10 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}
	d.waitProcessed(l.events())
	// Past the prune of the processed events: it waits, with one more batch,
	// for any transaction another test held open when the job's position
	// was taken (TestEventsProcessedBesideAnOlderOpenTransactionAreDeletedOnceItEnds).
	dbtest.WaitCommit(t, d.url, "the processed events to be deleted", []string{"click_events"}, func() bool { return d.events() == 0 })
	a.waitIdlePolls(t, 1)
	versions := func() string { // the rows' versions change with every write
		var v string
		err := d.obs.QueryRow(context.Background(), `SELECT
			(SELECT xmin::text || ctid::text FROM fencing_tokens WHERE resource = 'aggregator') || ' ' ||
			(SELECT xmin::text || ctid::text FROM click_aggregator_state)`).Scan(&v)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := versions()
	a.waitIdlePolls(t, 20)
	if after := versions(); after != before {
		t.Fatalf("the idle aggregator wrote: row versions %s → %s", before, after)
	}
	d.commit(l, []event{click(1, now)}, []string{""})
	d.waitProcessed(l.events())
	d.wantCounts(l)
	if after := versions(); after == before {
		t.Fatal("the event was counted without a fenced batch")
	}
}

func TestConcurrentProducersWithInterleavedCommitsAreCountedExactly(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	l := newLedger()
	d.startAggregator(1, small())

	// Each producer inserts, then holds its transaction open for a random
	// while before committing, so commits land in another order than ids.
	// One in five transactions rolls back: its events must never count.
	const producers, txs = 6, 40
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	base := time.Now().Add(-4 * time.Hour)
	for p := range producers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(p), 1))
			ctx := context.Background()
			for range txs {
				var evs []event
				for range 1 + r.IntN(5) {
					evs = append(evs, click(1+r.Int64N(links), base.Add(time.Duration(r.IntN(4*3600-60))*time.Second)))
				}
				tx, err := d.obs.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				if _, err := insert(ctx, tx, evs); err != nil {
					tx.Rollback(ctx)
					errs <- err
					return
				}
				time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
				if r.IntN(5) == 0 {
					tx.Rollback(ctx)
					continue
				}
				if err := tx.Commit(ctx); err != nil {
					errs <- err
					return
				}
				l.add(evs, make([]string, len(evs)))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	d.waitProcessed(l.events())
	d.wantCounts(l)
}

func TestBadEventsGoToRejectsWithTheirReasonAndNeverStopTheJob(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	l := newLedger()
	now := time.Now()
	a := d.startAggregator(1, small())

	good := click(7, now)
	nullLink := click(1, now)
	nullLink.link = nil
	noCountry := click(8, now)
	noCountry.country = nil // unknown country is fine
	evs := []event{
		good,
		nullLink,
		click(links+1, now),                 // unknown link
		click(-5, now),                      // unknown link
		click(2, now.Add(24*time.Hour)),     // future
		click(2, now.Add(-60*24*time.Hour)), // too old
		click(2, time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)),
		{link: ptr[int64](3), clickedAt: now, country: ptr("fr")},                 // bad country
		{link: ptr[int64](3), clickedAt: now, country: ptr("FRA")},                // bad country
		{link: ptr[int64](3), clickedAt: now, referrer: strings.Repeat("a", 254)}, // bad referrer
		noCountry,
		click(7, now.Add(2*time.Minute)), // within the allowed skew
	}
	reasons := []string{"", "null_link", "unknown_link", "unknown_link", "future", "too_old", "too_old",
		"bad_country", "bad_country", "bad_referrer", "", ""}
	d.commit(l, evs, reasons)
	// Good events after the bad ones are counted too.
	d.commit(l, []event{click(9, now)}, []string{""})
	d.waitProcessed(l.events())
	d.wantCounts(l)
	a.wantRunning(t)

	// The counters are added to just after the batch's commit, which
	// waitProcessed saw: wait for them to catch up, then check them.
	benchtest.Eventually(t, "the counters of the batch's events", func() bool {
		for reason, want := range l.rejects {
			if a.counter(t, "snip_aggregator_events_rejected_total", map[string]string{"reason": reason}) < float64(want) {
				return false
			}
		}
		return a.counter(t, "snip_aggregator_events_folded_total", nil) >= 4
	})
	for reason, want := range l.rejects {
		if got := a.counter(t, "snip_aggregator_events_rejected_total", map[string]string{"reason": reason}); got != float64(want) {
			t.Errorf("rejected{reason=%q} = %v, want %d", reason, got, want)
		}
	}
	if got := a.counter(t, "snip_aggregator_events_folded_total", nil); got != 4 {
		t.Errorf("folded = %v, want 4", got)
	}
	// The rejects keep the event as it was inserted.
	var ref string
	var link *int64
	err := d.obs.QueryRow(context.Background(), `SELECT link_id, coalesce(referrer_host, '') FROM click_rejects WHERE reason = 'bad_referrer'`).Scan(&link, &ref)
	if err != nil {
		t.Fatal(err)
	}
	if link == nil || *link != 3 || len(ref) != 254 {
		t.Errorf("bad_referrer reject: link %v, referrer of %d bytes; want link 3, 254 bytes", link, len(ref))
	}
}

// A forged low txid would hide its event below the aggregator's horizon,
// never counted: the database refuses it, also hidden among valid rows, and
// refuses any UPDATE of an event. Nothing of a refused statement stays.
func TestAProducerCannotWriteTheTransactionIDItself(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	ctx := context.Background()
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "click_events_xid_is_the_inserter") {
			t.Errorf("%s: %v; want click_events_xid_is_the_inserter to refuse it", what, err)
		}
	}
	_, err := d.obs.Exec(ctx, `INSERT INTO click_events (link_id) VALUES (1), (2)`)
	if err != nil {
		t.Fatalf("a producer's insert: %v", err)
	}
	_, err = d.obs.Exec(ctx, `INSERT INTO click_events (txid, link_id) VALUES ('3', 1)`)
	refused("insert with txid 3", err)
	_, err = d.obs.Exec(ctx, `INSERT INTO click_events (txid, link_id)
		SELECT pg_current_xact_id(), 1 UNION ALL SELECT '3', 2 UNION ALL SELECT pg_current_xact_id(), 3`)
	refused("insert of three rows, one with txid 3", err)
	if _, err := d.obs.CopyFrom(ctx, pgx.Identifier{"click_events"}, []string{"link_id"},
		pgx.CopyFromRows([][]any{{int64(1)}, {int64(2)}})); err != nil {
		t.Fatalf("a producer's COPY after the refused inserts: %v", err)
	}
	_, err = d.obs.Exec(ctx, `UPDATE click_events SET link_id = 2 WHERE link_id = 1`)
	refused("update of an event", err)

	var n, forged int
	if err := d.obs.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE txid = '3') FROM click_events`).Scan(&n, &forged); err != nil {
		t.Fatal(err)
	}
	if n != 4 || forged != 0 {
		t.Fatalf("click_events holds %d events, %d with a forged txid; want the 4 valid ones only", n, forged)
	}
}

func TestTwoAggregatorsWithDifferentTokensCountOnce(t *testing.T) {
	t.Parallel()
	t.Run("the older starts second and is refused before it folds anything", func(t *testing.T) {
		d := newDB(t, dbtest.NewDB(t))
		l := newLedger()
		now := time.Now()
		newer := d.startAggregator(20, small())
		for i := range 30 {
			d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
		}
		d.waitProcessed(l.events())

		// The older opens a batch only when it finds something to fold:
		// events commit until it has, and has been refused.
		older := d.startAggregator(10, small())
		benchtest.Eventually(t, "the older aggregator to open a batch", func() bool {
			d.commit(l, []event{click(1, now)}, []string{""})
			return older.returned()
		})
		err := older.wait(t)
		var stale *fencing.StaleTokenError
		if !errors.As(err, &stale) || stale.Current != 20 {
			t.Fatalf("older aggregator returned %v; want a StaleTokenError naming token 20", err)
		}
		d.waitProcessed(l.events())
		d.wantCounts(l)
		newer.wantRunning(t)
		if s := d.state(); s.token != 20 {
			t.Errorf("last batch by token %d, want 20", s.token)
		}
		if got := older.counter(t, "snip_aggregator_batches_total", nil); got != 0 {
			t.Errorf("the refused aggregator committed %v batches", got)
		}
	})

	t.Run("both run at once while producers commit; the older is refused at its first batch after the newer's first", func(t *testing.T) {
		d := newDB(t, dbtest.NewDB(t))
		l := newLedger()
		now := time.Now()
		older := d.startAggregator(10, small())
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range 200 {
				d.commit(l, []event{click(int64(1+i%links), now), click(1, now)}, []string{"", ""})
			}
		})
		// Start the newer one while the older is folding. The older opens a
		// batch only when it finds something to fold: events commit until it
		// has, and has been refused.
		d.waitFolded(20)
		newer := d.startAggregator(20, small())
		benchtest.Eventually(t, "the older aggregator to open a batch after the newer's", func() bool {
			d.commit(l, []event{click(1, now)}, []string{""})
			return older.returned()
		})
		err := older.wait(t)
		if !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("older aggregator returned %v; want ErrStaleToken", err)
		}
		wg.Wait()
		d.waitProcessed(l.events())
		d.wantCounts(l)
		newer.wantRunning(t)
	})
}

func TestALeaderKilledMidBatchLeavesNothingAndItsSuccessorContinues(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	l := newLedger()
	now := time.Now()
	ctx := context.Background()
	for i := range 40 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}

	// Hold link 1's count: the leader's batch stops at its upsert, after it
	// has read its events and written the other counts.
	hold, err := d.obs.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `INSERT INTO link_counts (link_id, clicks) VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	leader := d.startAggregator(10, small())

	// Its connection dies mid-batch: the leader survives and retries.
	pid := d.waitLockWait("agg-10")
	if _, err := d.obs.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	// Then the leader itself is killed mid-batch (its term's context ends).
	d.waitLockWait("agg-10")
	leader.wantRunning(t)
	if s := d.state(); s.folded != 0 {
		t.Fatalf("%d events counted while every batch was blocked", s.folded)
	}
	if err := leader.stop(t); err != nil {
		t.Fatalf("leader returned %v after its context ended; want nil", err)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if s := d.state(); s.folded != 0 {
		t.Fatalf("the killed leader's batch counted %d events", s.folded)
	}

	d.startAggregator(11, small())
	for i := range 40 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}
	d.waitProcessed(l.events())
	d.wantCounts(l)
}

func TestAPausedLeaderThatFinishesItsBatchAfterItsSuccessorStartedCountsOnce(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	l := newLedger()
	now := time.Now()
	ctx := context.Background()
	for i := range 40 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}

	// The leader stops mid-batch (as if paused), holding the fence.
	hold, err := d.obs.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `INSERT INTO link_counts (link_id, clicks) VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	leader := d.startAggregator(10, small())
	d.waitLockWait("agg-10")

	// Its successor starts and queues behind it at the fence.
	successor := d.startAggregator(11, small())
	d.waitLockWait("agg-11")

	// The leader wakes up and finishes its batch; the successor goes on
	// after it. The leader's next batch is refused: events commit until it
	// has opened one (with none to fold, neither opens a batch).
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	benchtest.Eventually(t, "the paused leader to open its next batch", func() bool {
		d.commit(l, []event{click(1, now)}, []string{""})
		return leader.returned()
	})
	if err := leader.wait(t); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("the paused leader returned %v; want ErrStaleToken", err)
	}
	if got := leader.counter(t, "snip_aggregator_batches_total", nil); got < 1 {
		t.Errorf("the paused leader committed %v batches; want the one it had started", got)
	}
	d.waitProcessed(l.events())
	d.wantCounts(l)
	successor.wantRunning(t)
}

func TestPostgresRestartsWhileProducersAndTheAggregatorRun(t *testing.T) {
	t.Parallel()
	pg := benchtest.StartPostgres(t)
	d := newDB(t, dbtest.NewDBIn(t, pg))
	l := newLedger()
	opts := small()
	opts.BatchSize = 50
	opts.Retention = time.Hour // producers' unknown commits are looked up
	a := d.startAggregator(1, opts)

	// Producers keep inserting through the restarts. A commit that fails is
	// looked up afterwards by its marker: it may have committed.
	stop := make(chan struct{})
	var unsure sync.Map // marker → events
	var wg sync.WaitGroup
	now := time.Now()
	for p := range 3 {
		wg.Go(func() {
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				marker := fmt.Sprintf("p%d-%d.example", p, i)
				evs := []event{click(int64(1+(i+p)%links), now), click(1, now)}
				for k := range evs {
					evs[k].referrer = marker
				}
				err := pgx.BeginFunc(ctx, d.obs, func(tx pgx.Tx) error {
					_, err := insert(ctx, tx, evs)
					return err
				})
				if err != nil {
					unsure.Store(marker, evs)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				l.add(evs, []string{"", ""})
			}
		})
	}
	waitFolded := func(n int64) {
		benchtest.Eventually(t, fmt.Sprintf("%d events counted", n), func() bool { return d.stateRetry().folded >= n })
	}
	waitFolded(100)
	pg.Restart(t)
	waitFolded(d.stateRetry().folded + 100)
	pg.Restart(t)
	waitFolded(d.stateRetry().folded + 100)
	close(stop)
	wg.Wait()

	unsure.Range(func(k, v any) bool {
		var n int
		if err := d.obs.QueryRow(context.Background(), `SELECT count(*) FROM click_events WHERE referrer_host = $1`, k).Scan(&n); err != nil {
			t.Fatal(err)
		}
		evs := v.([]event)
		switch n {
		case len(evs):
			l.add(evs, []string{"", ""})
		case 0:
		default:
			t.Fatalf("transaction %s left %d of its %d events", k, n, len(evs))
		}
		return true
	})
	d.waitProcessed(l.events())
	d.wantCounts(l)
	a.wantRunning(t)
	if got := a.counter(t, "snip_aggregator_errors_total", nil); got == 0 {
		t.Errorf("no failed batch was counted across two restarts")
	}
	if err := a.stop(t); err != nil {
		t.Errorf("aggregator returned %v at the end; want nil", err)
	}
}

// stateRetry is state, retried while the server restarts.
func (d *db) stateRetry() state {
	d.t.Helper()
	deadline := time.Now().Add(patience)
	for {
		var s state
		err := d.obs.QueryRow(context.Background(), `SELECT prev::text, folded, rejected, token FROM click_aggregator_state`).
			Scan(&s.prev, &s.folded, &s.rejected, &s.token)
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("read state: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTheLoopStopsWhenTheTermEnds(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	t.Run("Valid turns false", func(t *testing.T) {
		a := d.startAggregator(1, small())
		a.waitIdlePolls(t, 1)
		a.valid.Store(false)
		if err := a.wait(t); err != nil {
			t.Errorf("Run returned %v; want nil", err)
		}
	})
	t.Run("context ends", func(t *testing.T) {
		opts := small()
		opts.Interval = time.Hour // it is asleep when the context ends
		a := d.startAggregator(2, opts)
		a.waitIdlePolls(t, 1)
		if err := a.stop(t); err != nil {
			t.Errorf("Run returned %v; want nil", err)
		}
	})
}

func TestProcessedEventsAreDeletedOrKeptForTheRetention(t *testing.T) {
	// Not parallel: a horizon is a snapshot's xmin, which is the cluster's. A
	// transaction another test holds open in the shared cluster would keep
	// the recorded horizon below these events, and the retention case would
	// (rightly) wait for a later horizon to age past the hour.
	ctx := context.Background()
	now := time.Now()
	waitEvents := func(t *testing.T, d *db, want int) {
		dbtest.WaitCommit(t, d.url, fmt.Sprintf("click_events to hold %d events", want), []string{"click_events"},
			func() bool { return d.events() == want })
	}

	t.Run("retention 0 deletes them", func(t *testing.T) {
		d := newDB(t, dbtest.NewDB(t))
		l := newLedger()
		d.startAggregator(1, small())
		for i := range 30 {
			d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
		}
		d.commit(l, []event{click(links+1, now)}, []string{"unknown_link"})
		d.waitProcessed(l.events())
		waitEvents(t, d, 0)
		d.wantCounts(l)
	})

	t.Run("a retention keeps them until it has passed", func(t *testing.T) {
		d := newDB(t, dbtest.NewDB(t))
		l := newLedger()
		opts := small()
		opts.Retention = time.Hour
		a := d.startAggregator(1, opts)
		for i := range 30 {
			d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
		}
		d.waitProcessed(l.events())
		a.waitIdlePolls(t, 3)
		if n := d.events(); n != 30 {
			t.Fatalf("click_events holds %d events within the retention, want 30", n)
		}
		// An hour and a half passes, as far as the horizons say: the job
		// records one (the first since a minute, once, even while idle)
		// after every event was processed, which the test then moves back
		// in time.
		if _, err := d.obs.Exec(ctx, `DELETE FROM click_aggregator_horizons`); err != nil {
			t.Fatal(err)
		}
		dbtest.WaitCommit(t, d.url, "a horizon recorded", []string{"click_aggregator_horizons"}, func() bool {
			var n int
			if err := d.obs.QueryRow(ctx, `SELECT count(*) FROM click_aggregator_horizons`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		})
		if _, err := d.obs.Exec(ctx, `UPDATE click_aggregator_horizons SET recorded_at = recorded_at - interval '90 minutes'`); err != nil {
			t.Fatal(err)
		}
		waitEvents(t, d, 0)
		d.wantCounts(l)
	})
}

func TestEventsProcessedBesideAnOlderOpenTransactionAreDeletedOnceItEnds(t *testing.T) {
	// Not parallel: the open transaction holds back every snapshot's xmin in
	// the shared cluster (see the retention test above).
	ctx := context.Background()
	d := newDB(t, dbtest.NewDB(t))
	l := newLedger()
	older, err := d.obs.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer older.Rollback(ctx) //nolint:errcheck // rolled back below; a no-op then
	if _, err := older.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	d.startAggregator(1, small())
	for i := range 5 {
		d.commit(l, []event{click(int64(1+i%links), time.Now())}, []string{""})
	}
	// Every event is processed, in a position whose xmin is the older
	// transaction's: none of them lies below it, so none may be deleted yet.
	d.waitProcessed(l.events())
	if n := d.events(); n != 5 {
		t.Fatalf("click_events holds %d events while an older transaction is open, want 5", n)
	}
	// Once it ends, the job has nothing to fold, but a new position would let
	// it delete them: it takes one, and deletes them.
	if err := older.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	dbtest.WaitCommit(t, d.url, "click_events to be emptied", []string{"click_events"}, func() bool { return d.events() == 0 })
	d.wantCounts(l)
}

func TestOptionsAreValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*aggregator.Options)
		want string
	}{
		{"batch size 0", func(o *aggregator.Options) { o.BatchSize = 0 }, "batch_size must be from 1"},
		{"batch size too large", func(o *aggregator.Options) { o.BatchSize = aggregator.MaxBatchSize + 1 }, "batch_size must be from 1"},
		{"interval 0", func(o *aggregator.Options) { o.Interval = 0 }, "interval must be more than 0"},
		{"interval over an hour", func(o *aggregator.Options) { o.Interval = 2 * time.Hour }, "interval must be more than 0"},
		{"negative retention", func(o *aggregator.Options) { o.Retention = -time.Second }, "retention must not be negative"},
		{"negative skew", func(o *aggregator.Options) { o.MaxFutureSkew = -time.Second }, "max_future_skew must not be negative"},
		{"max age 0", func(o *aggregator.Options) { o.MaxAge = 0 }, "max_age must be more than 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := aggregator.DefaultOptions()
			tc.edit(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	o := aggregator.DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestTheTypeBuildsOnlyContinuousSingletonsWithValidOptions(t *testing.T) {
	t.Parallel()
	typ := aggregator.Type()
	if typ.Name != "aggregator" {
		t.Errorf("Name = %q", typ.Name)
	}
	checked, err := typ.Options(configs.Job{Name: "agg", Type: "aggregator"})
	if opts, ok := checked.Effective.(aggregator.Options); err != nil || !ok || opts != aggregator.DefaultOptions() {
		t.Errorf("Options() = %#v (%v), want Options with the defaults", checked.Effective, err)
	}
	good := configs.Job{Name: "agg", Type: "aggregator", Singleton: true, Schedule: configs.Schedule{Kind: configs.Continuous}}
	bad := aggregator.DefaultOptions()
	bad.BatchSize = 0
	for _, tc := range []struct {
		name string
		edit func(*configs.Job)
		want string
	}{
		{"every", func(j *configs.Job) { j.Schedule = configs.Schedule{Kind: configs.Interval, Every: time.Minute} }, "continuous"},
		{"not a singleton", func(j *configs.Job) { j.Singleton = false }, "singleton"},
		{"options of another type", func(j *configs.Job) {
			j.Options = jobtest.Options(t, struct {
				Bogus int `yaml:"bogus"`
			}{1})
		}, `unknown key "bogus" in options`},
		{"invalid options", func(j *configs.Job) { j.Options = jobtest.Options(t, bad) }, "batch_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := good
			tc.edit(&spec)
			_, err := typ.Build(scheduler.Env{}, spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	// Built twice on one registry (a config reload): the second reuses the
	// first's metrics.
	reg := prometheus.NewRegistry()
	for range 2 {
		if _, err := typ.New(scheduler.Env{Metrics: reg}, good); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := typ.New(scheduler.Env{}, good); err != nil {
		t.Errorf("New without a registry: %v", err)
	}
}
