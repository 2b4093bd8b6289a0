package aggregator_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/pgcluster"
)

// A pg_dump of a database whose transaction ids are far ahead, restored into
// a new cluster: the restored position is later than any snapshot there. The
// job refuses every batch, says so at ERROR once, and keeps refusing the same
// position after the new cluster's ids have overtaken it (folding from it
// would skip the events inserted meanwhile) — and so does a new leader, which
// finds the refusal recorded with the position. The reset of docs/aggregator.md,
// run as written there, lets it count every event exactly once: those
// processed before the dump (restored counts), those not yet processed at the
// dump, and those the new cluster took while the job refused.
func TestAfterAPgDumpRestoreIntoANewClusterBatchesAreRefusedUntilTheReset(t *testing.T) {
	t.Parallel()
	d, l, restoredMax := restoredFromAhead(t)
	restored := d.state()
	now := time.Now()

	// Every batch is refused; the new cluster's producers go on.
	agg := d.startAggregator(100, small()) // above the restored fence's token
	for i := range 10 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}
	refusals := func() float64 { return agg.counter(t, "snip_aggregator_errors_total", nil) }
	benchtest.Eventually(t, "three refused batches", func() bool { return refusals() >= 3 })

	// The new cluster's ids overtake the restored position: the check alone
	// would let batches run from it now, and skip the events above.
	overtake(t, d)
	after := refusals()
	benchtest.Eventually(t, "two more refused batches (the second begun after the ids overtook the position), or a batch that ran", func() bool {
		return refusals() >= after+2 || d.state() != restored
	})
	if s := d.state(); s != restored {
		t.Fatalf("a batch ran from the restored position once the ids had overtaken it (position %s, %d counted, %d rejected; restored %s, %d, %d): "+
			"the events the new cluster inserted below it are never counted", s.prev, s.folded, s.rejected, restored.prev, restored.folded, restored.rejected)
	}
	if n := agg.logs.count(slog.LevelError, "click_aggregator_state"); n != 1 {
		t.Errorf("%d ERROR records about click_aggregator_state over %v refused batches; want 1", n, refusals())
	}
	if msgs := agg.logs.atLeast(slog.LevelWarn); len(msgs) != 1 {
		t.Errorf("records at WARN or above: %q; want the one ERROR", msgs)
	}

	// A new leader (a failover, a restart), whose check alone would pass now.
	if err := agg.stop(t); err != nil {
		t.Fatal(err)
	}
	agg = d.startAggregator(101, small())
	refusals = func() float64 { return agg.counter(t, "snip_aggregator_errors_total", nil) }
	benchtest.Eventually(t, "the new leader's two refused batches, or a batch that ran", func() bool {
		return refusals() >= 2 || d.state() != restored
	})
	if s := d.state(); s != restored {
		t.Fatalf("a new leader ran a batch from the restored position once the ids had overtaken it (position %s; restored %s)", s.prev, restored.prev)
	}
	if n := agg.logs.count(slog.LevelError, "click_aggregator_state"); n != 1 {
		t.Errorf("%d ERROR records about click_aggregator_state from the new leader; want 1", n)
	}

	// The reset, as docs/aggregator.md writes it.
	reset := strings.ReplaceAll(docSQL(t, "## After a pg_dump restore"), ":restored_max_id", fmt.Sprint(restoredMax))
	benchtest.Exec(t, d.obs, reset)
	for i := range 10 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}
	d.waitProcessed(l.events())
	d.wantCounts(l)
	if n := agg.logs.count(slog.LevelInfo, "batches run again"); n != 1 {
		t.Errorf("%d INFO records saying batches run again; want 1", n)
	}
	agg.wantRunning(t)
}

// A restored position that no batch looked at while the new cluster's ids
// were below it: by the time the aggregator starts, the ids have overtaken it,
// and the check of the snapshots alone passes. The batch sees that the
// database is another cluster than the one the position was stored on, and
// that events numbered after the position look processed in it: it refuses,
// and the reset lets every event be counted exactly once.
func TestARestoredPositionNoBatchSawBeforeTheIdsOvertookItIsStillRefused(t *testing.T) {
	t.Parallel()
	d, l, restoredMax := restoredFromAhead(t)
	restored := d.state()
	now := time.Now()
	for i := range 5 { // below the restored position, in the new numbering
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}
	overtake(t, d)
	for i := range 5 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}

	agg := d.startAggregator(100, small())
	refusals := func() float64 { return agg.counter(t, "snip_aggregator_errors_total", nil) }
	benchtest.Eventually(t, "two refused batches, or a batch that ran", func() bool {
		return refusals() >= 2 || d.state() != restored
	})
	if s := d.state(); s != restored {
		t.Fatalf("a batch ran from the restored position (position %s, %d counted; restored %s, %d): "+
			"the 5 events the new cluster numbered below it are never counted", s.prev, s.folded, restored.prev, restored.folded)
	}
	if n := agg.logs.count(slog.LevelError, "click_aggregator_state"); n != 1 {
		t.Errorf("%d ERROR records about click_aggregator_state; want 1", n)
	}

	reset := strings.ReplaceAll(docSQL(t, "## After a pg_dump restore"), ":restored_max_id", fmt.Sprint(restoredMax))
	benchtest.Exec(t, d.obs, reset)
	d.waitProcessed(l.events())
	d.wantCounts(l)
	agg.wantRunning(t)
}

// Another cluster with the same numbering of transactions (pg_upgrade, a
// physical copy, a promoted standby): the batch finds no event numbered after
// the position that looks processed in it, records the new cluster, says so
// at INFO, and goes on counting.
func TestAnotherClusterWithTheSameNumberingCarriesOn(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	l := newLedger()
	now := time.Now()
	agg := d.startAggregator(1, small())
	for i := range 10 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}
	d.waitProcessed(l.events())
	real := benchtest.Value[int64](t, d.obs, `SELECT cluster_id FROM click_aggregator_state`)
	if want := benchtest.Value[int64](t, d.obs, `SELECT system_identifier FROM pg_control_system()`); real != want {
		t.Fatalf("cluster_id %d, want this cluster's system identifier %d", real, want)
	}
	// As a pg_upgrade leaves it: another cluster's identifier stored.
	benchtest.Exec(t, d.obs, `UPDATE click_aggregator_state SET cluster_id = 42`)
	for i := range 10 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}
	d.waitProcessed(l.events())
	d.wantCounts(l)
	if n := agg.logs.count(slog.LevelInfo, "on another PostgreSQL cluster than the last batch"); n != 1 {
		t.Errorf("%d INFO records about the cluster change; want 1", n)
	}
	if got := benchtest.Value[int64](t, d.obs, `SELECT cluster_id FROM click_aggregator_state`); got != real {
		t.Errorf("cluster_id after the change: %d, want %d", got, real)
	}
	if msgs := agg.logs.atLeast(slog.LevelWarn); len(msgs) != 0 {
		t.Errorf("records at WARN or above: %q; want none", msgs)
	}
	agg.wantRunning(t)
}

// A database that will not say which cluster it is (pg_control_system()
// revoked, as some managed services do): the job counts as ever, warns once
// that the guard needing it is off, and records no cluster.
func TestADatabaseThatHidesItsClusterStillCountsAndSaysTheGuardIsOff(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	benchtest.Exec(t, d.obs, `CREATE ROLE aggregator_job LOGIN;
		GRANT ALL ON ALL TABLES IN SCHEMA public TO aggregator_job;
		GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO aggregator_job;
		REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC`)
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User = "aggregator_job"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	l := newLedger()
	now := time.Now()
	agg := d.startAggregatorOn(pool, 1, small())
	for i := range 10 {
		d.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}
	d.waitProcessed(l.events())
	d.wantCounts(l)
	if msgs := agg.logs.atLeast(slog.LevelWarn); len(msgs) != 1 || !strings.Contains(msgs[0], "pg_control_system()") {
		t.Errorf("records at WARN or above: %q; want one saying pg_control_system() is not readable", msgs)
	}
	if n := benchtest.Value[int64](t, d.obs, `SELECT count(*) FROM click_aggregator_state WHERE cluster_id IS NULL`); n != 1 {
		t.Errorf("a cluster recorded without reading it")
	}
	agg.wantRunning(t)
}

// restoredFromAhead makes a database whose transaction ids are far ahead
// (about 10 000), runs an aggregator on it, leaves events unprocessed, dumps
// it and restores the dump into a new cluster (ids near 1 000). It returns the
// restored database, the ledger of every event committed, and the highest
// event id the restore loaded.
func restoredFromAhead(t *testing.T) (*db, *ledger, int64) {
	t.Helper()
	bindir, err := pgcluster.FindBindir()
	if err != nil {
		t.Fatal(err)
	}
	src := newDB(t, dbtest.NewDB(t))
	benchtest.Exec(t, src.obs, `DO $$ BEGIN
	WHILE pg_snapshot_xmax(pg_current_snapshot()) < '10000'::xid8 LOOP
		PERFORM pg_current_xact_id();
		COMMIT;
	END LOOP;
END $$`)

	l := newLedger()
	now := time.Now()
	opts := small()
	opts.Retention = time.Hour // processed events stay, and are dumped too
	a := src.startAggregator(1, opts)
	for i := range 20 {
		src.commit(l, []event{click(int64(1+i%links), now)}, []string{""})
	}
	src.commit(l, []event{click(links+1, now), click(2, now)}, []string{"unknown_link", ""})
	src.waitProcessed(l.events())
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	// Not processed when the dump is taken.
	nullLink := click(1, now)
	nullLink.link = nil
	for i := range 10 {
		src.commit(l, []event{click(int64(1+i%links), now), click(3, now)}, []string{"", ""})
	}
	src.commit(l, []event{nullLink, click(links+2, now)}, []string{"null_link", "unknown_link"})

	dump := filepath.Join(t.TempDir(), "snip.dump")
	command(t, filepath.Join(bindir, "pg_dump"), "--format=custom", "--file", dump, "--dbname", src.url)
	pg := benchtest.StartPostgres(t)
	d := &db{t: t, url: pg.CreateDatabase(t)}
	// The new cluster has the roles too, so the dump's grants restore: the
	// aggregators run as the runtime role, as before the dump.
	_, d.job = dbtest.Roles(t, d.url)
	command(t, filepath.Join(bindir, "pg_restore"), "--exit-on-error", "--no-owner", "--dbname", d.url, dump)
	d.obs = d.pool("observer")
	restoredMax := benchtest.Value[int64](t, d.obs, `SELECT last_value FROM click_events_id_seq`)
	if !benchtest.Value[bool](t, d.obs, `SELECT pg_snapshot_xmax(pg_current_snapshot()) < pg_snapshot_xmax(prev) FROM click_aggregator_state`) {
		t.Fatalf("the new cluster's ids are not below the restored position %s: the test needs them below",
			benchtest.Value[string](t, d.obs, `SELECT prev::text FROM click_aggregator_state`))
	}
	return d, l, restoredMax
}

// overtake runs transactions in d until its ids pass the stored position's.
func overtake(t *testing.T, d *db) {
	t.Helper()
	benchtest.Exec(t, d.obs, `DO $$
DECLARE stored xid8 := (SELECT pg_snapshot_xmax(prev) FROM click_aggregator_state);
BEGIN
	WHILE pg_snapshot_xmax(pg_current_snapshot()) <= stored LOOP
		PERFORM pg_current_xact_id();
		COMMIT;
	END LOOP;
END $$`)
}

// command runs a program, failing the test with its output if it fails.
func command(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

// docSQL returns the first sql block after heading in docs/aggregator.md.
func docSQL(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/aggregator.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/aggregator.md has no heading %q", heading)
	}
	_, block, ok := strings.Cut(section, "\n```sql\n")
	if !ok {
		t.Fatalf("docs/aggregator.md: no sql block under %q", heading)
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatalf("docs/aggregator.md: the sql block under %q does not end", heading)
	}
	return block
}
