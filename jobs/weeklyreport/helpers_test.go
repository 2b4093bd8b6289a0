package weeklyreport_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/weeklyreport"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

func TestMain(m *testing.M) {
	benchtest.MostlyWaiting(8) // instances waiting for slots and leases
	os.Exit(benchtest.RunMain(m))
}

const jobName = "weekly-report"

// patience bounds waits for things that must happen; it only decides how long
// a broken build takes to fail, never whether a healthy one passes.
const patience = 60 * time.Second

// db is one test's database with the real schema. The test plays the
// aggregator (it writes links and link_hourly_counts) and the scheduler (it
// claims cron slots) through pool, as the superuser; the job's writes go
// through svc, as the runtime role of docs/operations.md.
type db struct {
	t    testing.TB
	url  string // the superuser's
	pool *pgxpool.Pool
	svc  *pgxpool.Pool
}

func newDB(t testing.TB) *db {
	t.Helper()
	roles := dbtest.NewDB(t)
	return &db{t: t, url: roles.Super, pool: dbtest.Pool(t, roles.Super), svc: dbtest.Pool(t, roles.Runtime)}
}

// waitSlots waits until cond holds, woken by each commit to cron_slots (a
// slot claimed, done or skipped), not by polling.
func (d *db) waitSlots(what string, cond func() bool) {
	d.t.Helper()
	dbtest.WaitCommit(d.t, d.url, what, []string{"cron_slots"}, cond)
}

func (d *db) exec(sql string, args ...any) { d.t.Helper(); benchtest.Exec(d.t, d.pool, sql, args...) }

// links adds links: id → slug.
func (d *db) links(slugs map[int64]string) {
	d.t.Helper()
	for id, slug := range slugs {
		d.exec(`INSERT INTO links (id, slug) VALUES ($1, $2)`, id, slug)
	}
}

// clicks adds n clicks of link in the UTC hour that starts at hour.
func (d *db) clicks(link int64, hour time.Time, n int64) {
	d.t.Helper()
	if !hour.Truncate(time.Hour).Equal(hour) {
		d.t.Fatalf("clicks at %v: not the start of an hour", hour)
	}
	d.exec(`INSERT INTO link_hourly_counts (link_id, hour, clicks) VALUES ($1, $2, $3)
		ON CONFLICT (link_id, hour) DO UPDATE SET clicks = link_hourly_counts.clicks + EXCLUDED.clicks`,
		link, hour, n)
}

// claim records that instance claimed job's slot with token, as the
// scheduler does before it calls the job; a later claim of the same slot (a
// successor's) replaces it.
func (d *db) claim(job string, slot time.Time, token int64, instance string) {
	d.t.Helper()
	d.exec(`INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ($1, $2, 'running', $3, $4)
		ON CONFLICT (job, slot) DO UPDATE SET state = 'running', token = EXCLUDED.token,
			instance = EXCLUDED.instance, attempts = cron_slots.attempts + 1`,
		job, slot, token, instance)
}

// run is a Run of job as the scheduler would hand it over: token, slot (zero
// for an operator's run) and fenced writes through this database.
func (d *db) run(job, instance string, token int64, slot time.Time) *scheduler.Run {
	return scheduler.NewRun(scheduler.RunConfig{
		Job: job, Instance: instance, Token: token, Slot: slot,
		Fence: fencing.New(d.svc, instance),
	})
}

// runSlot claims job's slot with token on instance and runs j for it.
func (d *db) runSlot(j scheduler.Job, job string, slot time.Time, token int64, instance string) error {
	d.t.Helper()
	d.claim(job, slot, token, instance)
	return j.Run(context.Background(), d.run(job, instance, token, slot))
}

func (d *db) mustRunSlot(j scheduler.Job, slot time.Time, token int64, instance string) {
	d.t.Helper()
	if err := d.runSlot(j, jobName, slot, token, instance); err != nil {
		d.t.Fatalf("run of slot %v with token %d: %v", slot, token, err)
	}
}

func (d *db) int(sql string, args ...any) int64 {
	d.t.Helper()
	return benchtest.Value[int64](d.t, d.pool, sql, args...)
}

func (d *db) str(sql string, args ...any) string {
	d.t.Helper()
	return benchtest.Value[string](d.t, d.pool, sql, args...)
}

// slotState is the state of job's slot and the token it was claimed with.
func (d *db) slotState(job string, slot time.Time) string {
	d.t.Helper()
	var state string
	var token int64
	err := d.pool.QueryRow(context.Background(), `SELECT state, token FROM cron_slots WHERE job = $1 AND slot = $2`,
		job, slot).Scan(&state, &token)
	if err == pgx.ErrNoRows {
		return "unclaimed"
	}
	if err != nil {
		d.t.Fatal(err)
	}
	return fmt.Sprintf("%s by %d", state, token)
}

// storedRow is a weekly_reports row as the test sees it.
type storedRow struct {
	Job, TimeZone, Instance string
	Start, End              time.Time
	Text, CSV               string
	Token                   int64
	CreatedAt, ReplacedAt   string // as PostgreSQL prints them; ReplacedAt "" if never
	Replacements            int
}

func (d *db) stored(week string) storedRow {
	d.t.Helper()
	var r storedRow
	err := d.pool.QueryRow(context.Background(), `SELECT job, time_zone, instance, week_start, week_end,
			body_text, body_csv, token, created_at::text, coalesce(replaced_at::text, ''), replacements
		FROM weekly_reports WHERE week = $1`, week).Scan(&r.Job, &r.TimeZone, &r.Instance, &r.Start, &r.End,
		&r.Text, &r.CSV, &r.Token, &r.CreatedAt, &r.ReplacedAt, &r.Replacements)
	if err != nil {
		d.t.Fatalf("stored report %s: %v", week, err)
	}
	return r
}

// weeks lists the stored weeks, oldest first.
func (d *db) weeks() []string {
	d.t.Helper()
	rows, _ := d.pool.Query(context.Background(), `SELECT week FROM weekly_reports ORDER BY week_start`)
	weeks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		d.t.Fatal(err)
	}
	return weeks
}

type outboxRow struct {
	ID      int64
	Week    string
	Subject string
	Sent    bool
}

// outbox lists the mailer's queue, oldest first.
func (d *db) outbox() []outboxRow {
	d.t.Helper()
	rows, _ := d.pool.Query(context.Background(),
		`SELECT id, week, subject, sent_at IS NOT NULL FROM weekly_report_outbox ORDER BY id`)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[outboxRow])
	if err != nil {
		d.t.Fatal(err)
	}
	return out
}

func (d *db) show(week string) *weeklyreport.Report {
	d.t.Helper()
	r, err := weeklyreport.Show(context.Background(), d.pool, week)
	if err != nil {
		d.t.Fatalf("Show(%q): %v", week, err)
	}
	return r
}

// newJob builds a weeklyreport job as the scheduler would from the config:
// cron "0 8 * * MON" in zone, with opts (nil: the defaults).
func newJob(t testing.TB, zone string, opts *weeklyreport.Options) scheduler.Job {
	t.Helper()
	j, err := buildJob(zone, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return j
}

func buildJob(zone string, opts *weeklyreport.Options) (scheduler.Job, error) {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, err
	}
	spec := configs.Job{
		Name: jobName, Type: "weeklyreport", Singleton: true,
		Schedule: configs.Schedule{Kind: configs.Cron, Cron: "0 8 * * MON", Location: loc},
	}
	if opts != nil {
		if spec.Options, err = configs.EncodeOptions(*opts); err != nil {
			return nil, err
		}
	}
	return weeklyreport.Type().Build(scheduler.Env{Instance: "test"}, spec)
}

func mustLoad(t testing.TB, zone string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// at is a local wall-clock time "2006-01-02 15:04" in loc. Use utc for
// times that a DST change makes ambiguous or impossible.
func at(loc *time.Location, s string) time.Time {
	t, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		panic(err)
	}
	return t
}

func utc(s string) time.Time { return at(time.UTC, s) }

// The report's lists, written as the spec writes them.

func days(r *weeklyreport.Report) []string {
	var out []string
	for _, d := range r.Days {
		out = append(out, fmt.Sprintf("%s %s %dh %d", d.Weekday[:3], d.Date, d.Hours, d.Clicks))
	}
	return out
}

func top(r *weeklyreport.Report) []string {
	var out []string
	for _, l := range r.Top {
		out = append(out, fmt.Sprintf("%d %s %d", l.ID, l.Slug, l.Clicks))
	}
	return out
}

func growth(gs []weeklyreport.Growth) []string {
	var out []string
	for _, g := range gs {
		rel := "new"
		if g.Relative != nil {
			rel = fmt.Sprintf("%+.0f%%", *g.Relative*100)
		}
		out = append(out, fmt.Sprintf("%d %s %d->%d %+d %s", g.ID, g.Slug, g.Previous, g.Clicks, g.Increase, rel))
	}
	return out
}
