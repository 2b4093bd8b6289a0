package weeklyreport_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
)

func TestAStaleTokenIsRefusedAndLeavesTheStoredReportUntouched(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	paris := mustLoad(t, "Europe/Paris")
	seedNormalWeek(d, paris)
	j := newJob(t, "Europe/Paris", nil)
	slot := at(paris, "2026-11-23 08:00")

	// server-1 claimed the slot with token 100 and paused before writing;
	// server-2's newer term (token 200) took the slot over and stored the week.
	d.claim(jobName, slot, 100, "server-1")
	paused := d.run(jobName, "server-1", 100, slot)
	d.mustRunSlot(j, slot, 200, "server-2")
	before := d.stored("2026-W47")

	// Clicks the aggregator counted since: a write by server-1 would differ.
	d.clicks(1, at(paris, "2026-11-22 12:00"), 500)

	err := j.Run(context.Background(), paused)
	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 100 || stale.Current != 200 || stale.Holder != "server-2" {
		t.Fatalf("paused run: error %v, want *fencing.StaleTokenError (100 refused, 200 by server-2)", err)
	}
	// So is an operator's rebuild made with an old term's token.
	err = weeklyreport.Rebuild(context.Background(), d.run(jobName, "server-1", 150, time.Time{}), "2026-W47")
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("rebuild with token 150: %v, want a stale token error", err)
	}

	if after := d.stored("2026-W47"); after != before {
		t.Errorf("stored report changed:\n%+v\nwant\n%+v", after, before)
	}
	if got := d.outbox(); len(got) != 1 {
		t.Errorf("outbox %+v, want one row", got)
	}
	if got := d.slotState(jobName, slot); got != "done by 200" {
		t.Errorf("slot: %s, want done by 200", got)
	}
}

func TestRunningAWeekAgainStoresNoSecondReport(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	paris := mustLoad(t, "Europe/Paris")
	seedNormalWeek(d, paris)
	j := newJob(t, "Europe/Paris", nil)
	slot := at(paris, "2026-11-23 08:00")
	d.mustRunSlot(j, slot, 100, "server-1")
	first := d.stored("2026-W47")
	d.clicks(1, at(paris, "2026-11-22 12:00"), 500) // counted late: only a rebuild shows them

	// The same slot, called again with the same run (the scheduler would not:
	// CompleteSlot marked it done together with the report).
	if err := j.Run(context.Background(), d.run(jobName, "server-1", 100, slot)); err != nil {
		t.Fatalf("same slot again: %v", err)
	}
	// Another slot of the same week (a daily cron, or a catch-up).
	d.mustRunSlot(j, at(paris, "2026-11-24 08:00"), 100, "server-1")
	// A second weeklyreport job in the same database: its writes are fenced
	// on another resource, so only the week's key stops it.
	other := "weekly-report-copy"
	if err := d.runSlot(j, other, slot, 300, "server-3"); err != nil {
		t.Fatalf("second job: %v", err)
	}

	if got := d.stored("2026-W47"); got != first {
		t.Errorf("stored report changed:\n%+v\nwant\n%+v", got, first)
	}
	if got := d.weeks(); !slices.Equal(got, []string{"2026-W47"}) {
		t.Errorf("weeks %v, want only 2026-W47", got)
	}
	if got := d.outbox(); len(got) != 1 {
		t.Errorf("outbox %+v, want one row", got)
	}
	for _, s := range []struct {
		job  string
		slot time.Time
		want string
	}{
		{jobName, slot, "done by 100"},
		{jobName, at(paris, "2026-11-24 08:00"), "done by 100"},
		{other, slot, "done by 300"},
	} {
		if got := d.slotState(s.job, s.slot); got != s.want {
			t.Errorf("slot %s %v: %s, want %s", s.job, s.slot, got, s.want)
		}
	}

	// Whatever the code does, the schema has no room for a second report or
	// a second message of a week.
	for _, sql := range []string{
		`INSERT INTO weekly_reports (week, job, time_zone, week_start, week_end, body, body_text, body_csv, token, instance)
			SELECT week, 'x', time_zone, week_start, week_end, body, body_text, body_csv, 999, 'x' FROM weekly_reports`,
		`INSERT INTO weekly_report_outbox (week, subject) VALUES ('2026-W47', 'again')`,
	} {
		_, err := d.pool.Exec(context.Background(), sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Errorf("%s: %v, want a unique violation", strings.Fields(sql)[2], err)
		}
	}
}

func TestRebuildReplacesTheReportWithoutASecondMail(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	paris := mustLoad(t, "Europe/Paris")
	seedNormalWeek(d, paris)
	j := newJob(t, "Europe/Paris", &weeklyreport.Options{Top: 3, Growth: 3, GrowthMinPrevious: 10})
	d.mustRunSlot(j, at(paris, "2026-11-23 08:00"), 100, "server-1")
	first := d.stored("2026-W47")
	d.exec(`UPDATE weekly_report_outbox SET sent_at = now()`) // the mailer sent it
	mailed := d.outbox()

	// The aggregator was behind at 08:00: 500 more clicks of beta on Sunday.
	d.clicks(2, at(paris, "2026-11-22 12:00"), 500)
	// The operator rebuilds with a run of the job (a newer term, no slot).
	rebuild := d.run(jobName, "server-2", 200, time.Time{})
	if err := weeklyreport.Rebuild(context.Background(), rebuild, "2026-W47"); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}

	r := d.show("2026-W47")
	if r.Total != 607 || r.Days[6].Clicks != 507 {
		t.Errorf("rebuilt: total %d, Sunday %d; want 607, 507", r.Total, r.Days[6].Clicks)
	}
	// The stored options (top 3), not the defaults, shape the rebuilt lists.
	if got, want := top(r), []string{"2 beta 512", "1 alpha 30", "3 gamma 30"}; !slices.Equal(got, want) {
		t.Errorf("top %q, want %q", got, want)
	}
	second := d.stored("2026-W47")
	if second.Token != 200 || second.Instance != "server-2" || second.Replacements != 1 || second.ReplacedAt == "" {
		t.Errorf("rebuilt row: token %d instance %s replacements %d replaced_at %v; want 200 server-2 1 set",
			second.Token, second.Instance, second.Replacements, second.ReplacedAt)
	}
	if second.CreatedAt != first.CreatedAt || second.Job != first.Job {
		t.Errorf("rebuild changed created_at or job: %+v, was %+v", second, first)
	}
	if second.Text == first.Text || second.Text != r.Text() || second.CSV != r.CSV() {
		t.Errorf("rebuilt text/CSV not replaced with the new report's")
	}
	if got := d.outbox(); !slices.Equal(got, mailed) {
		t.Errorf("outbox %+v, want it untouched %+v: a replaced report is not mailed again", got, mailed)
	}

	// Rebuilding from the same data gives the same report.
	if err := weeklyreport.Rebuild(context.Background(), rebuild, "2026-W47"); err != nil {
		t.Fatalf("second Rebuild: %v", err)
	}
	third := d.stored("2026-W47")
	if third.Text != second.Text || third.CSV != second.CSV || third.Replacements != 2 {
		t.Errorf("same data rebuilt: text same %v, CSV same %v, replacements %d (want 2)",
			third.Text == second.Text, third.CSV == second.CSV, third.Replacements)
	}

	// Rebuild never creates a week, and refuses a run of another job.
	err := weeklyreport.Rebuild(context.Background(), rebuild, "2026-W46")
	if !errors.Is(err, weeklyreport.ErrNotFound) {
		t.Errorf("rebuild of a week never stored: %v, want ErrNotFound", err)
	}
	err = weeklyreport.Rebuild(context.Background(), d.run("other-job", "server-2", 300, time.Time{}), "2026-W47")
	if err == nil || !strings.Contains(err.Error(), "stored by job "+jobName) {
		t.Errorf("rebuild by another job: %v, want a refusal naming %s", err, jobName)
	}
	err = weeklyreport.Rebuild(context.Background(), rebuild, "2026-W54")
	if err == nil || !strings.Contains(err.Error(), "2026 has no ISO week 54") {
		t.Errorf("rebuild of 2026-W54: %v", err)
	}
	if got := d.weeks(); !slices.Equal(got, []string{"2026-W47"}) {
		t.Errorf("weeks %v, want only 2026-W47", got)
	}
	if got := d.outbox(); !slices.Equal(got, mailed) {
		t.Errorf("outbox %+v, want %+v", got, mailed)
	}
	if got := d.stored("2026-W47"); got != third {
		t.Errorf("refused rebuilds changed the report: %+v", got)
	}
}

func TestShowAndPrint(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	if _, err := weeklyreport.Show(ctx, d.pool, ""); !errors.Is(err, weeklyreport.ErrNotFound) {
		t.Errorf("Show latest of nothing: %v, want ErrNotFound", err)
	}

	paris := mustLoad(t, "Europe/Paris")
	seedNormalWeek(d, paris)
	j := newJob(t, "Europe/Paris", &weeklyreport.Options{Top: 3, Growth: 3, GrowthMinPrevious: 10})
	d.mustRunSlot(j, at(paris, "2026-11-23 08:00"), 100, "server-1")
	d.mustRunSlot(j, at(paris, "2026-11-16 08:00"), 100, "server-1") // stored after, but an older week

	if r := d.show(""); r.Week != "2026-W47" {
		t.Errorf("Show latest: %s, want 2026-W47 (the latest week, not the latest written)", r.Week)
	}
	if r := d.show("2026-W46"); r.Week != "2026-W46" || r.Total != 75 || r.Stored.Token != 100 || r.Stored.Job != jobName {
		t.Errorf("Show 2026-W46: week %s total %d token %d job %s", r.Week, r.Total, r.Stored.Token, r.Stored.Job)
	}
	if _, err := weeklyreport.Show(ctx, d.pool, "2026-W45"); !errors.Is(err, weeklyreport.ErrNotFound) {
		t.Errorf("Show 2026-W45: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"2026-47", "2026-W0", "2026-W00", "2025-W53", "W47"} {
		_, err := weeklyreport.Show(ctx, d.pool, bad)
		if err == nil || errors.Is(err, weeklyreport.ErrNotFound) || !strings.Contains(err.Error(), bad) {
			t.Errorf("Show(%q): %v, want an error about the week's spelling", bad, err)
		}
	}

	// Times the test can write down.
	d.exec(`UPDATE weekly_reports SET created_at = '2026-11-23 07:00:05+00' WHERE week = '2026-W47'`)
	var out bytes.Buffer
	if err := weeklyreport.Print(ctx, d.pool, &out, ""); err != nil {
		t.Fatal(err)
	}
	want := `# 2026-W47: stored by job weekly-report, created 2026-11-23 07:00:05 UTC; content written by server-1 with token 100

Snip weekly report 2026-W47
Monday 16 November 2026 to Sunday 22 November 2026 (Europe/Paris)

Clicks: 107 on 6 links (2026-W46: 75, +42.7%)

Clicks per day
  Mon 16 Nov  10
  Tue 17 Nov   5
  Wed 18 Nov  50
  Thu 19 Nov   8
  Fri 20 Nov  25
  Sat 21 Nov   2
  Sun 22 Nov   7

Top links
  1.  alpha    30
  2.  gamma    30
  3.  epsilon  25

Grew most against 2026-W46
  1.  alpha    10  ->  30  +20  +200.0%
  2.  beta      0  ->  12  +12      new
  3.  epsilon  20  ->  25   +5   +25.0%

Grew fastest against 2026-W46 (links with at least 10 clicks then)
  1.  alpha    10  ->  30  +20  +200.0%
  2.  epsilon  20  ->  25   +5   +25.0%
`
	if out.String() != want {
		t.Errorf("Print:\n%s\nwant:\n%s", out.String(), want)
	}

	wantCSV := `section,rank,date,hours,link_id,slug,clicks,previous_clicks,increase,relative_increase
total,,2026-11-16,168,,,107,75,32,0.4266666666666667
day,,2026-11-16,24,,,10,,,
day,,2026-11-17,24,,,5,,,
day,,2026-11-18,24,,,50,,,
day,,2026-11-19,24,,,8,,,
day,,2026-11-20,24,,,25,,,
day,,2026-11-21,24,,,2,,,
day,,2026-11-22,24,,,7,,,
top,1,,,1,alpha,30,,,
top,2,,,3,gamma,30,,,
top,3,,,6,epsilon,25,,,
grew_most,1,,,1,alpha,30,10,20,2
grew_most,2,,,2,beta,12,0,12,
grew_most,3,,,6,epsilon,25,20,5,0.25
grew_fastest,1,,,1,alpha,30,10,20,2
grew_fastest,2,,,6,epsilon,25,20,5,0.25
`
	if got := d.show("2026-W47").Stored.CSV; got != wantCSV {
		t.Errorf("CSV:\n%s\nwant:\n%s", got, wantCSV)
	}

	// A replaced report says so.
	if err := weeklyreport.Rebuild(ctx, d.run(jobName, "server-2", 200, time.Time{}), "2026-W47"); err != nil {
		t.Fatal(err)
	}
	d.exec(`UPDATE weekly_reports SET replaced_at = '2026-11-24 09:30:00+00' WHERE week = '2026-W47'`)
	out.Reset()
	if err := weeklyreport.Print(ctx, d.pool, &out, "2026-W47"); err != nil {
		t.Fatal(err)
	}
	wantHeader := "# 2026-W47: stored by job weekly-report, created 2026-11-23 07:00:05 UTC, " +
		"replaced 1 time (last 2026-11-24 09:30:00 UTC); content written by server-2 with token 200\n"
	if got, _, _ := strings.Cut(out.String(), "\n"); got+"\n" != wantHeader {
		t.Errorf("Print header of a replaced report:\n%s\nwant:\n%s", got, wantHeader)
	}
}

func TestDSTDaysAreMarkedInTheText(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	paris := mustLoad(t, "Europe/Paris")
	d.mustRunSlot(newJob(t, "Europe/Paris", nil), at(paris, "2026-03-30 08:00"), 100, "server-1")
	d.mustRunSlot(newJob(t, "Europe/Paris", nil), at(paris, "2026-10-26 08:00"), 100, "server-1")
	for week, want := range map[string]string{
		"2026-W13": "  Sun 29 Mar  0  23 hours: clocks went forward\n",
		"2026-W43": "  Sun 25 Oct  0  25 hours: clocks went back\n",
	} {
		if text := d.show(week).Stored.Text; !strings.Contains(text, want) {
			t.Errorf("%s text has no line %q:\n%s", week, want, text)
		}
	}
}

func TestTwoJobsRacingForAWeekStoreOneReport(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	ctx := context.Background()
	paris := mustLoad(t, "Europe/Paris")
	seedNormalWeek(d, paris)
	slot := at(paris, "2026-11-23 08:00")

	// Another weeklyreport job (fenced on its own resource, so the fence does
	// not order the two) has inserted 2026-W47 and not committed yet.
	other, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	var otherPID int32
	if err := other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `INSERT INTO weekly_reports
		(week, job, time_zone, week_start, week_end, body, body_text, body_csv, token, instance)
		VALUES ('2026-W47', 'other-job', 'Europe/Paris', $1, $2, '{}', 'theirs', '', 1, 'server-9')`,
		at(paris, "2026-11-16 00:00"), at(paris, "2026-11-23 00:00")); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `INSERT INTO weekly_report_outbox (week, subject) VALUES ('2026-W47', 'theirs')`); err != nil {
		t.Fatal(err)
	}

	// Our run does not see it, builds the report, and its insert waits on the
	// week's key.
	j := newJob(t, "Europe/Paris", nil)
	d.claim(jobName, slot, 100, "server-1")
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx, d.run(jobName, "server-1", 100, slot)) }()
	waitCtx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	for {
		var blocked bool
		if err := d.pool.QueryRow(waitCtx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND $1 = ANY (pg_blocking_pids(pid)))`, otherPID).Scan(&blocked); err != nil {
			t.Fatalf("waiting for the run to block on the other job's insert: %v", err)
		}
		if blocked {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run ended (%v) without waiting for the other job's insert", err)
		case <-time.After(time.Millisecond):
		}
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := d.stored("2026-W47"); got.Job != "other-job" || got.Text != "theirs" {
		t.Errorf("stored report by %s (%q), want the other job's", got.Job, got.Text)
	}
	if got := d.outbox(); len(got) != 1 || got[0].Subject != "theirs" {
		t.Errorf("outbox %+v, want only the other job's row", got)
	}
	if got := d.slotState(jobName, slot); got != "done by 100" {
		t.Errorf("slot: %s, want done by 100", got)
	}
}
