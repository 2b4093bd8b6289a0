package aggregator_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// Whether an event's link exists is decided once per batch, in the snapshot
// of the statement that counts. Here a trigger on link_hourly_counts swaps two
// links while that statement runs: it deletes link A, which the statement saw
// and counted, and creates link B, which the statement saw missing. The
// batch's next statement sees the opposite. The batch holds as many valid
// events on A as on B, so its totals balance whichever links each statement
// went by: only where each event went shows whether one was counted and
// rejected while another was neither.
func TestALinkDeletedAndAnotherCreatedDuringTheFoldLeaveEveryEventCountedOrRejectedOnce(t *testing.T) {
	t.Parallel()
	d := newDB(t, dbtest.NewDB(t))
	ctx := context.Background()
	const linkA, linkB, linkC = 7, links + 100, 3

	// Nothing references links, so the trigger's delete needs no cascade.
	if n := benchtest.Value[int](t, d.obs, `SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND confrelid = 'links'::regclass`); n != 0 {
		t.Fatalf("%d foreign keys reference links; the test's delete of a link assumes none", n)
	}
	// SECURITY DEFINER: the swap is Snip's application's doing, not the
	// aggregator's role's, which may only read links.
	benchtest.Exec(t, d.obs, fmt.Sprintf(`CREATE FUNCTION test_swap_links() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
	DELETE FROM links WHERE id = %[1]d;
	IF FOUND THEN
		INSERT INTO links (id, slug) VALUES (%[2]d, 'created-during-the-fold');
	END IF;
	RETURN NULL;
END $$`, linkA, linkB))
	benchtest.Exec(t, d.obs, fmt.Sprintf(`CREATE TRIGGER test_swap_links AFTER INSERT OR UPDATE ON link_hourly_counts
	FOR EACH ROW WHEN (NEW.link_id = %d) EXECUTE FUNCTION test_swap_links()`, linkA))

	// One producer transaction: one batch holds all of it.
	l := newLedger()
	now := time.Now()
	nullLink := click(linkC, now)
	nullLink.link = nil
	badCountryOnB := click(linkB, now)
	badCountryOnB.country = ptr("fr")
	evs := []event{
		click(linkA, now), click(linkB, now), click(linkC, now),
		click(linkA, now), nullLink, click(linkB, now),
		badCountryOnB, click(linkB, now.Add(24*time.Hour)),
		click(linkA, now), click(linkB, now), click(linkC, now),
	}
	// A existed when the fold read links, B did not; an event with a reason
	// of its own keeps it.
	reasons := []string{
		"", "unknown_link", "",
		"", "null_link", "unknown_link",
		"bad_country", "future",
		"", "unknown_link", "",
	}
	ids := d.commit(l, evs, reasons)
	d.startAggregator(1, small())
	d.waitProcessed(l.events())

	if n := benchtest.Value[int](t, d.obs, `SELECT count(*) FROM links WHERE id IN ($1, $2)`, linkA, linkB); n != 1 ||
		!benchtest.Value[bool](t, d.obs, `SELECT EXISTS (SELECT FROM links WHERE id = $1)`, linkB) {
		t.Fatalf("the trigger did not swap the links during the fold: link %d should be gone and link %d there", linkA, linkB)
	}

	// Every event in click_rejects once, with its reason, or counted.
	want := map[int64]string{}
	for i, id := range ids {
		if reasons[i] != "" {
			want[id] = reasons[i]
		}
	}
	got := map[int64]string{}
	rows, _ := d.obs.Query(ctx, `SELECT event_id, reason FROM click_rejects`)
	var id int64
	var reason string
	if _, err := pgx.ForEachRow(rows, []any{&id, &reason}, func() error { got[id] = reason; return nil }); err != nil {
		t.Fatal(err)
	}
	link := func(id int64) string {
		i := slices.Index(ids, id)
		if evs[i].link == nil {
			return "NULL"
		}
		return fmt.Sprint(*evs[i].link)
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[id]; !ok {
			t.Errorf("event %d (link %s) was neither counted nor rejected; want rejected as %s", id, link(id), want[id])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(got)) {
		switch w, ok := want[id]; {
		case !ok:
			t.Errorf("event %d (link %s) was counted and also rejected as %s", id, link(id), got[id])
		case w != got[id]:
			t.Errorf("event %d (link %s) rejected as %s, want %s", id, link(id), got[id], w)
		}
	}
	d.wantCounts(l)
}
