package chaos

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/testbench/dbtest"
)

// The "no acting leader" figure is the longest gap between accepted probe
// writes from the last one before the fault until the cluster settled; for a
// slow-database partition it starts at the cut, since the fault slows the
// leader's writes before it.
func TestNoActingMeasuresTheLongestGapAroundAFault(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var probe []probeRow
	for i, ms := range []int{0, 4000, 4250, 6500, 6750, 7000} { // one write in the slowed link, a takeover at 4.25→6.5 s
		probe = append(probe, probeRow{Seq: int64(i + 1), Committed: at(ms)})
	}
	probe = append(probe, probeRow{Seq: 0, Committed: at(5000)}) // refused by the fence: not a write

	kill := &Fault{Kind: KillLeader, Start: at(4300), Settled: at(6800)}
	slow := &Fault{Kind: PartitionSlowDB, Start: at(3000), Settled: at(6800)}
	early := &Fault{Kind: KillLeader, Start: at(3000), Settled: at(6800)}
	noActing(probe, []*Fault{kill, slow, early})

	if want := 2250 * time.Millisecond; kill.NoActing != want { // 4.25 → 6.5
		t.Errorf("kill: no acting leader %v, want %v", kill.NoActing, want)
	}
	if want := 2250 * time.Millisecond; slow.NoActing != want { // from the cut at 3 s: 3→4 is 1 s, then 4.25→6.5
		t.Errorf("partition-slow-db: no acting leader %v, want %v (counted from the cut)", slow.NoActing, want)
	}
	if want := 4 * time.Second; early.NoActing != want { // any other kind counts from the last write before: 0→4
		t.Errorf("kill before the slowed write: no acting leader %v, want %v", early.NoActing, want)
	}
}

// "No acting leader" is a gap in the probe's writes, so for a fault aimed at
// a leader it counts only when the target led the probe; etcd and PostgreSQL
// faults stop every job, and count always. The figure says over how many.
func TestNoActingCountsOnlyFaultsThatStruckTheProbesLeader(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	rep := &Report{Jobs: []string{JobProbe, JobReport, JobCerts, JobAggregator}, Faults: []*Fault{
		{Kind: KillLeader, Led: []string{JobProbe, JobCerts}, NoActing: ms(2300)},
		{Kind: KillLeader, Led: []string{JobAggregator}, NoActing: ms(260)},
		{Kind: KillLeader, Led: []string{JobReport}, NoActing: ms(270)},
		{Kind: PostgresRestart, NoActing: ms(2100)},
		{Kind: PostgresRestart, NoActing: ms(2200)},
		// a report written before Led was recorded: the probe's takeover says it was struck
		{Kind: PauseLeader, Takeovers: []Takeover{{Job: JobProbe}}, NoActing: ms(2400)},
		{Kind: PauseLeader, Takeovers: []Takeover{{Job: JobCerts}}, NoActing: ms(250)},
	}}
	got := map[Kind]KindStats{}
	for _, s := range rep.ByKind() {
		got[s.Kind] = s
	}
	for _, c := range []struct {
		kind   Kind
		faults int
		want   Dist
	}{
		{KillLeader, 3, Dist{N: 1, P50: ms(2300), P99: ms(2300), Max: ms(2300)}},
		{PostgresRestart, 2, Dist{N: 2, P50: ms(2100), P99: ms(2200), Max: ms(2200)}},
		{PauseLeader, 2, Dist{N: 1, P50: ms(2400), P99: ms(2400), Max: ms(2400)}},
	} {
		if s := got[c.kind]; s.Faults != c.faults || s.NoActing != c.want {
			t.Errorf("%s: %d faults, no acting leader %+v; want %d faults, %+v", c.kind, s.Faults, s.NoActing, c.faults, c.want)
		}
	}
	md := rep.Markdown()
	for _, want := range []string{
		"| kill-leader | 3 | 2.3s / 2.3s / 2.3s (1) |",
		"| postgres-restart | 2 | 2.1s / 2.2s / 2.2s (2) |",
		"Leaders struck (faults aimed at a leader whose target led the job): probe 1, weekly-report 1, cert-renewer 1, aggregator 1.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}

// writeLogDB is a database with the project's schema and the harness's, and
// a way to open sessions named as an instance names its own.
func writeLogDB(t *testing.T) (*pgxpool.Pool, func(app string) *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url, pool := dbtest.New(t)
	if err := setupSchema(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return pool, func(app string) *pgx.Conn {
		t.Helper()
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["application_name"] = app
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
}

func run(t *testing.T, tx interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) {
	t.Helper()
	if _, err := tx.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func begin(t *testing.T, conn *pgx.Conn) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func commit(t *testing.T, tx pgx.Tx) {
	t.Helper()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func checkLog(t *testing.T, pool *pgxpool.Pool, granted ...termEvent) []Violation {
	t.Helper()
	f, err := readFacts(context.Background(), pool, granted)
	if err != nil {
		t.Fatal(err)
	}
	k := &checker{pool: pool, ttl: 2 * time.Second}
	k.checkWrites(f)
	return k.out
}

// A job's writes are checked in the order they committed, not the order they
// ran: a stale term's transaction that wrote first and committed after its
// successor's is reported, once, naming both. An update of the aggregator's
// state that sets neither token nor updated_at (a prune) is not a write of
// the token it leaves in the row.
func TestTheWriteLogReportsALowerTokenCommittedAfterAHigherOne(t *testing.T) {
	pool, connect := writeLogDB(t)
	a, b := connect("snip-jobs run server-a"), connect("snip-jobs run server-b")
	reject := `INSERT INTO click_rejects (event_id, txid, clicked_at, reason, token) VALUES ($1, '1', now(), 'null_link', $2)`

	stale := begin(t, a)
	run(t, stale, reject, 1, 5)
	run(t, stale, reject, 2, 5)
	successor := begin(t, b)
	run(t, successor, reject, 3, 7)
	commit(t, successor)
	commit(t, stale) // after the successor's
	run(t, b, `UPDATE click_aggregator_state SET token = 7, updated_at = now()`)
	run(t, pool, `UPDATE click_aggregator_state SET unpruned = 0`) // not an instance's session: reported if logged

	out := checkLog(t, pool,
		termEvent{Job: JobAggregator, Token: 5, Instance: "server-a", Start: true},
		termEvent{Job: JobAggregator, Token: 7, Instance: "server-b", Start: true})
	if len(out) != 1 || out[0].Invariant != InvTokenOrder {
		t.Fatalf("violations %+v, want one of %q", out, InvTokenOrder)
	}
	for _, want := range []string{"aggregator's click_rejects insert", "by server-a with token 5", "after aggregator's click_rejects insert", "by server-b with token 7"} {
		if !strings.Contains(out[0].Detail, want) {
			t.Errorf("the violation %q does not say %q", out[0].Detail, want)
		}
	}
}

// Each logged write's token must be a term of its job that etcd granted to
// the instance whose session wrote it; a row that names an instance must name
// that one; a write in a fenced transaction must carry the fence's token. The
// cron slots an operator's resume records skipped are no term's writes.
func TestTheWriteLogReportsWritesByNoGrantedTerm(t *testing.T) {
	pool, connect := writeLogDB(t)
	a, c := connect("snip-jobs run server-a"), connect("snip-jobs run server-c")
	fenced := func(token int) pgx.Tx { // as package fencing names its transactions
		tx := begin(t, a)
		run(t, tx, `SELECT set_config('application_name', current_setting('application_name') || ' fence-token=' || $1, true)`, strconv.Itoa(token))
		return tx
	}

	run(t, c, `INSERT INTO click_rejects (event_id, txid, clicked_at, reason, token) VALUES (1, '1', now(), 'null_link', 9)`)
	tx := fenced(5)
	run(t, tx, `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ($1, now(), 'running', 5, 'server-b')`, JobReport)
	commit(t, tx)
	tx = fenced(8)
	run(t, tx, `INSERT INTO certrenew_job (job, token) VALUES ($1, 6)`, JobCerts)
	commit(t, tx)
	tx = fenced(6)
	run(t, tx, `UPDATE certrenew_job SET token = 6, updated_at = now()`) // all well
	commit(t, tx)
	// a slot an operator's resume records skipped: no term's write, not logged
	run(t, connect("snip-jobs resume server-a"), `INSERT INTO cron_slots (job, slot, state, token, instance, error)
		VALUES ($1, now() - interval '1 minute', 'skipped', 0, '', 'paused by op')`, JobReport)

	out := checkLog(t, pool,
		termEvent{Job: JobReport, Token: 5, Instance: "server-a", Start: true},
		termEvent{Job: JobCerts, Token: 6, Instance: "server-a", Start: true})
	var got []string
	for _, v := range out {
		if v.Invariant != InvTermOwner {
			t.Errorf("unexpected violation: %s: %s", v.Invariant, v.Detail)
		}
		got = append(got, v.Detail)
	}
	for _, want := range []string{
		"aggregator's click_rejects insert (transaction",   // token 9, granted to nobody
		"weekly-report's cron_slots insert (transaction",   // names server-b
		"cert-renewer's certrenew_job insert (transaction", // fenced with 8
	} {
		if !slices.ContainsFunc(got, func(d string) bool { return strings.HasPrefix(d, want) }) {
			t.Errorf("no violation starts with %q; got %q", want, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("%d violations, want 3: %q", len(got), got)
	}
}

// A count that differs from the committed events says how many events lie
// beyond the aggregator's last position: committed after it last read (not
// the job's to count yet), as against skipped.
func TestACountMismatchSaysHowManyEventsWereBeyondTheAggregatorsPosition(t *testing.T) {
	pool, _ := writeLogDB(t)
	ctx := context.Background()
	run(t, pool, `INSERT INTO click_events (link_id, referrer_host, country) VALUES (1, 'example.org', 'FR')`)
	run(t, pool, `UPDATE click_aggregator_state SET prev = pg_current_snapshot()`) // the job has read up to here
	run(t, pool, `INSERT INTO click_events (link_id, referrer_host, country) VALUES (1, 'example.org', 'FR')`)
	run(t, pool, `INSERT INTO link_counts (link_id, clicks) VALUES (1, 1)`) // the first counted, the second not reached

	k := &checker{pool: pool}
	if _, err := k.checkCounts(ctx); err != nil {
		t.Fatal(err)
	}
	var said bool
	for _, v := range k.out {
		if v.Invariant != InvCounts {
			t.Errorf("violation of %q, want only %q: %s", v.Invariant, InvCounts, v.Detail)
		}
		said = said || strings.HasPrefix(v.Detail, "1 committed events are beyond the aggregator's last position")
	}
	if !said {
		t.Errorf("the violations %+v do not say that 1 event was beyond the aggregator's position", k.out)
	}
}

// checkControlsOf runs the controls' checks over the database, with the
// instances' renew interval renew and the terms the observer saw granted.
func checkControlsOf(t *testing.T, pool *pgxpool.Pool, renew time.Duration, granted ...termEvent) ([]Violation, ControlStats) {
	t.Helper()
	f, err := readFacts(context.Background(), pool, granted)
	if err != nil {
		t.Fatal(err)
	}
	k := &checker{pool: pool, ttl: 2 * time.Second, renew: renew}
	s := k.checkControls(f)
	return k.out, s
}

// detailsOf lists the details of the violations of inv, and reports any of
// another invariant.
func detailsOf(t *testing.T, out []Violation, inv string) []string {
	t.Helper()
	var got []string
	for _, v := range out {
		if v.Invariant != inv {
			t.Errorf("unexpected violation: %s: %s", v.Invariant, v.Detail)
			continue
		}
		got = append(got, v.Detail)
	}
	return got
}

func wantDetails(t *testing.T, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.ContainsFunc(got, func(d string) bool { return strings.Contains(d, w) }) {
			t.Errorf("no violation says %q; got %q", w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d violations, want %d: %q", len(got), len(want), got)
	}
}

// sleepPast waits until the database's clock is past a renew interval after
// the newest pause or drain committed: what the instances do from then on
// they do while it is in force.
func sleepPast(t *testing.T, pool *pgxpool.Pool, renew time.Duration) {
	t.Helper()
	for {
		var past bool
		err := pool.QueryRow(context.Background(), `SELECT clock_timestamp() > max(committed) + $1::interval FROM chaos_controls`, renew).Scan(&past)
		if err != nil {
			t.Fatal(err)
		}
		if past {
			return
		}
		time.Sleep(renew / 4)
	}
}

// A paused job acts if a term, a run, or a transaction of its writes begins
// from a renew interval after its pause committed until its resume
// committed, or a manual run of it is requested meanwhile; the harness's log
// keeps the pause's times, which its resume deletes. Before the pause, after
// the resume, and for another job, nothing is reported.
// A machine too busy to write within the renew interval of the pause has the
// test try again with twice the interval.
func TestAPausedJobThatActsIsAViolation(t *testing.T) {
	for renew := 40 * time.Millisecond; !pausedJobActs(t, renew); renew *= 2 {
		if renew > 5*time.Second {
			t.Fatalf("no write landed within %v of the pause's commit", renew)
		}
		t.Logf("the write meant to land within the renew interval (%v) of the pause came later on this machine; trying twice that", renew)
	}
}

// pausedJobActs is TestAPausedJobThatActsIsAViolation with renew interval
// renew; false if the write meant to land within it did not.
func pausedJobActs(t *testing.T, renew time.Duration) bool {
	pool, connect := writeLogDB(t)
	a, b := connect("snip-jobs run server-a"), connect("snip-jobs run server-b")
	probe := `INSERT INTO chaos_probe (instance, token, trigger) VALUES ($1, $2, 'schedule')`
	slot := `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ($1, now(), 'running', 6, 'server-b')`

	run(t, a, probe, "server-a", 5) // before the pause
	run(t, pool, `INSERT INTO job_pauses (job, paused_by) VALUES ($1, 'op')`, JobProbe)
	run(t, a, probe, "server-a", 5) // within the renew interval: the instances may not know yet
	var within bool
	if err := pool.QueryRow(context.Background(), `SELECT clock_timestamp() <= max(committed) + $1::interval FROM chaos_controls`, renew).Scan(&within); err != nil {
		t.Fatal(err)
	}
	if !within {
		return false
	}
	sleepPast(t, pool, renew)
	run(t, a, probe, "server-a", 5)
	run(t, a, `INSERT INTO job_runs (job, instance, token) VALUES ($1, 'server-a', 5)`, JobProbe)
	run(t, a, `INSERT INTO job_terms (job, token, instance) VALUES ($1, 7, 'server-a')`, JobProbe)
	run(t, pool, `INSERT INTO manual_runs (job, mode, requested_by) VALUES ($1, 'leader', 'op')`, JobProbe)
	run(t, b, slot, JobReport) // another job, not paused
	run(t, pool, `DELETE FROM job_pauses WHERE job = $1`, JobProbe)
	run(t, a, probe, "server-a", 5) // resumed

	out, s := checkControlsOf(t, pool, renew,
		termEvent{Job: JobProbe, Token: 5, Instance: "server-a", Start: true, At: time.Now().Add(-time.Hour)},
		termEvent{Job: JobReport, Token: 6, Instance: "server-b", Start: true, At: time.Now().Add(-time.Hour)})
	got := detailsOf(t, out, InvPaused)
	wantDetails(t, got, "probe row 3's transaction (token 5) by server-a", "run 1 of probe (schedule, token 5) by server-a",
		"term 7 of probe by server-a", "manual run 1 of probe was requested")
	if s.Pauses != 1 {
		t.Errorf("%d pauses checked, want 1", s.Pauses)
	}
	return true
}

// A drained instance acts if it begins a term, a run, or a transaction of
// writes of any job from a renew interval after its drain committed until its
// undrain committed; the other instances, and it before and after, do not.
func TestADrainedInstanceThatActsIsAViolation(t *testing.T) {
	pool, connect := writeLogDB(t)
	a, b := connect("snip-jobs run server-a"), connect("snip-jobs run server-b")
	renew := 40 * time.Millisecond
	slot := `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ($1, now() - $2::interval, 'running', 6, 'server-b')`

	run(t, b, slot, JobReport, "1 hour") // before the drain
	run(t, pool, `INSERT INTO instance_drains (instance, drained_by) VALUES ('server-b', 'op')`)
	sleepPast(t, pool, renew)
	run(t, b, slot, JobReport, "2 hours")
	run(t, b, `INSERT INTO job_terms (job, token, instance) VALUES ($1, 8, 'server-b')`, JobCerts)
	run(t, a, `INSERT INTO chaos_probe (instance, token) VALUES ('server-a', 5)`) // another instance
	run(t, pool, `DELETE FROM instance_drains WHERE instance = 'server-b'`)
	run(t, b, slot, JobReport, "3 hours") // undrained

	out, s := checkControlsOf(t, pool, renew)
	got := detailsOf(t, out, InvDrained)
	wantDetails(t, got, "weekly-report's transaction", "term 8 of cert-renewer by server-b")
	if s.Drains != 1 {
		t.Errorf("%d drains checked, want 1", s.Drains)
	}
}

// Each manual run of the probe executes once: a done request has exactly one
// committed probe row naming it, written by its claimer with its token; a
// request not done has none; a probe row of a manual run names a request;
// and the run a request names is a manual run of its claimer.
func TestAManualRunThatExecutesTwiceIsAViolation(t *testing.T) {
	pool, connect := writeLogDB(t)
	a := connect("snip-jobs run server-a")
	ctx := context.Background()
	runOf := func(trigger string) int64 {
		var id int64
		if err := a.QueryRow(ctx, `INSERT INTO job_runs (job, instance, token, trigger) VALUES ($1, 'server-a', 5, $2) RETURNING id`,
			JobProbe, trigger).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	request := func(state string, runID int64) int64 {
		var id int64
		if err := pool.QueryRow(ctx, `INSERT INTO manual_runs (job, mode, requested_by, state, instance, token, run_id, attempts)
			VALUES ($1, 'leader', 'op', $2, 'server-a', 5, nullif($3, 0::bigint), 1) RETURNING id`, JobProbe, state, runID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	row := func(trigger string, manual int64) {
		run(t, a, `INSERT INTO chaos_probe (instance, token, trigger, manual_run) VALUES ('server-a', 5, $1, nullif($2, 0::bigint))`, trigger, manual)
	}
	twice := request("done", runOf("manual"))
	row("manual", twice)
	row("manual", twice)
	request("done", runOf("manual")) // never executed
	once := request("done", runOf("manual"))
	row("manual", once) // all well
	failed := request("failed", 0)
	row("manual", failed)
	request("done", runOf("schedule")) // names a run of the schedule
	row("manual", 0)
	row("schedule", 0) // all well

	out, s := checkControlsOf(t, pool, 40*time.Millisecond)
	got := detailsOf(t, out, InvManual)
	wantDetails(t, got, "manual run 1 of the probe executed 2 times", "manual run 2 of the probe is done", "manual run 4 of the probe committed its run",
		"manual run 5 of probe (done, claimed by server-a with token 5) names run 4, which is not a manual run", "written by a manual run that names no request",
		"manual run 5 of the probe is done (by server-a with token 5) but no run of it committed")
	if s.ManualRuns != 5 || s.Done != 4 || s.Executed != 4 {
		t.Errorf("stats %+v, want 5 requests, 4 done, 4 rows of manual runs", s)
	}
}

// The records of terms and runs are checked against each other: a run of a
// term that began after the term's recorded end (or its successor's start),
// two ok runs of a job that overlap, and a run left open more than a TTL
// after its term's successor began are each reported; a run of the new
// binary only, in an upgrade (the previous release's records are not held
// to these rules).
func TestRecordsThatContradictTheTermsAreViolations(t *testing.T) {
	pool, _ := writeLogDB(t)
	at := func(secs int) string { return fmt.Sprintf("now() - interval '%d seconds'", 100-secs) }
	run(t, pool, `INSERT INTO job_terms (job, token, instance, started_at, ended_at) VALUES
		('probe', 5, 'server-a', `+at(0)+`, `+at(30)+`), ('probe', 9, 'server-b', `+at(40)+`, NULL)`)
	for _, r := range []struct {
		instance string
		token    int
		start    int
		end      int // -1: open
		result   string
	}{
		{"server-a", 5, 10, 20, "ok"},      // within its term: fine
		{"server-a", 5, 35, 36, "error"},   // began after its term's end
		{"server-a", 5, 21, 45, "ok"},      // overlapping token 9's ok run
		{"server-b", 9, 41, 50, "ok"},      //
		{"server-a", 5, 25, -1, ""},        // open, 60 s after its successor began
		{"server-c", 77, 90, 91, "ok"},     // no term of the job has this token: a claim's run, not checked
		{"server-b", 9, 44, 46, "cut off"}, // overlaps, but not ok
	} {
		finished, result := "NULL", "NULL"
		if r.end >= 0 {
			finished, result = at(r.end), "'"+r.result+"'"
		}
		run(t, pool, fmt.Sprintf(`INSERT INTO job_runs (job, instance, token, started_at, finished_at, result)
			VALUES ('probe', $1, $2, %s, %s, %s)`, at(r.start), finished, result), r.instance, r.token)
	}
	f, err := readFacts(context.Background(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := &checker{pool: pool, ttl: 2 * time.Second}
	k.checkRecords(f, nil, f.asOf)
	var got []string
	for _, v := range k.out {
		got = append(got, v.Invariant+": "+v.Detail)
	}
	wantDetails(t, got, InvRunInTerm+": run 2 of probe (token 5) by server-a began",
		InvOKOverlap+": runs 3 (token 5, server-a",
		InvRunClosed+": run 5 of probe (token 5) by server-a is still open")

	// In an upgrade, server-a ran the previous release until later: its
	// runs are not checked.
	k = &checker{pool: pool, ttl: 2 * time.Second}
	k.checkRecords(f, map[string]time.Time{"server-a": f.asOf}, f.asOf)
	if len(k.out) != 0 {
		t.Errorf("the previous release's runs were checked: %+v", k.out)
	}
}
