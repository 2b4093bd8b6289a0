package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// checkCounts: per link and hour, the aggregator's counts equal the committed
// valid events; invalid ones are in click_rejects, once each.
func (k *checker) checkCounts(ctx context.Context) (CountStats, error) {
	var s CountStats
	err := k.pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE e.defect IS NULL AND l.id IS NOT NULL),
		count(*) FILTER (WHERE NOT (e.defect IS NULL AND l.id IS NOT NULL))
		FROM chaos_clicks e LEFT JOIN links l ON l.id = e.link_id`).Scan(&s.Valid, &s.Invalid)
	if err != nil {
		return s, fmt.Errorf("count events: %w", err)
	}
	if err := k.pool.QueryRow(ctx, `SELECT coalesce(sum(clicks), 0) FROM link_counts`).Scan(&s.Counted); err != nil {
		return s, err
	}
	if err := k.pool.QueryRow(ctx, `SELECT count(*) FROM click_rejects`).Scan(&s.Rejected); err != nil {
		return s, err
	}
	type diff struct {
		Link           int64
		Hour           time.Time
		Events, Counts int64
	}
	rows, err := k.pool.Query(ctx, `
		WITH want AS (
			SELECT e.link_id, e.hour, count(*) AS n FROM chaos_clicks e JOIN links l ON l.id = e.link_id
			WHERE e.defect IS NULL GROUP BY 1, 2)
		SELECT coalesce(w.link_id, h.link_id), coalesce(w.hour, h.hour), coalesce(w.n, 0), coalesce(h.clicks, 0)
		FROM want w FULL JOIN link_hourly_counts h ON h.link_id = w.link_id AND h.hour = w.hour
		WHERE coalesce(w.n, 0) <> coalesce(h.clicks, 0)
		UNION ALL
		SELECT coalesce(w.link_id, c.link_id), 'epoch', coalesce(w.n, 0), coalesce(c.clicks, 0)
		FROM (SELECT e.link_id, count(*) AS n FROM chaos_clicks e JOIN links l ON l.id = e.link_id
		      WHERE e.defect IS NULL GROUP BY 1) w
		FULL JOIN link_counts c ON c.link_id = w.link_id
		WHERE coalesce(w.n, 0) <> coalesce(c.clicks, 0)
		LIMIT 20`)
	if err != nil {
		return s, fmt.Errorf("compare counts: %w", err)
	}
	diffs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[diff])
	if err != nil {
		return s, err
	}
	if len(diffs) > 0 {
		// Whether the missing events were ever the job's to count: committed
		// after its last position (a harness race, or a job stopped early),
		// or before it (skipped: the bug the invariant is for).
		var beyond int64
		if err := k.pool.QueryRow(ctx, `SELECT count(*) FROM chaos_clicks e, click_aggregator_state s
			WHERE NOT pg_visible_in_snapshot(e.txid, s.prev)`).Scan(&beyond); err != nil {
			return s, err
		}
		k.violate(InvCounts, "%d committed events are beyond the aggregator's last position (committed after it last read); the others were before it", beyond)
	}
	for _, d := range diffs {
		where := "in total"
		if d.Hour.Unix() != 0 {
			where = "in the hour " + d.Hour.UTC().Format("2006-01-02T15Z")
		}
		k.violate(InvCounts, "link %d %s: %d committed valid events, %d counted", d.Link, where, d.Events, d.Counts)
	}
	if s.Rejected != s.Invalid {
		k.violate(InvCounts, "%d committed invalid events, %d in click_rejects", s.Invalid, s.Rejected)
	}
	var dup int64
	if err := k.pool.QueryRow(ctx, `SELECT count(*) FROM click_rejects r JOIN chaos_clicks e ON e.id = r.event_id
		JOIN links l ON l.id = e.link_id WHERE e.defect IS NULL`).Scan(&dup); err != nil {
		return s, err
	}
	if dup > 0 {
		k.violate(InvCounts, "%d valid events were rejected", dup)
	}
	return s, nil
}

// checkReports: one report and one outbox row per week; every report and every
// completed slot carries a term of the report job.
func (k *checker) checkReports(ctx context.Context, f *facts) (ReportStats, error) {
	var s ReportStats
	rows, err := k.pool.Query(ctx, `SELECT week, token, instance FROM weekly_reports`)
	if err != nil {
		return s, err
	}
	type rep struct {
		Week     string
		Token    int64
		Instance string
	}
	reps, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rep])
	if err != nil {
		return s, err
	}
	s.Reports = len(reps)
	for _, r := range reps {
		if !f.granted(JobReport, r.Token, r.Instance) {
			k.violate(InvReport, "report of %s stored with token %d by %s: not a term of %s granted to it", r.Week, r.Token, r.Instance, JobReport)
		}
	}
	var dupWeeks int
	if err := k.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT week FROM weekly_report_outbox GROUP BY week HAVING count(*) > 1) d`).Scan(&dupWeeks); err != nil {
		return s, err
	}
	if dupWeeks > 0 {
		k.violate(InvReport, "%d weeks have more than one outbox row", dupWeeks)
	}
	var missing int
	if err := k.pool.QueryRow(ctx, `SELECT count(*) FROM weekly_reports r WHERE NOT EXISTS (SELECT 1 FROM weekly_report_outbox o WHERE o.week = r.week)`).Scan(&missing); err != nil {
		return s, err
	}
	if missing > 0 {
		k.violate(InvReport, "%d stored reports have no outbox row", missing)
	}
	rows, err = k.pool.Query(ctx, `SELECT slot, state, token, instance FROM cron_slots WHERE job = $1 ORDER BY slot`, JobReport)
	if err != nil {
		return s, err
	}
	type slot struct {
		Slot     time.Time
		State    string
		Token    int64
		Instance string
	}
	slots, err := pgx.CollectRows(rows, pgx.RowToStructByPos[slot])
	if err != nil {
		return s, err
	}
	for _, sl := range slots {
		switch sl.State {
		case "done":
			s.SlotsDone++
			if !f.granted(JobReport, sl.Token, sl.Instance) {
				k.violate(InvReport, "slot %s done with token %d by %s: not a term of %s granted to it", sl.Slot.Format(time.RFC3339), sl.Token, sl.Instance, JobReport)
			}
		case "skipped":
			s.SlotsSkipped++
		default:
			s.SlotsOpen++
		}
	}
	return s, nil
}

// checkCerts: at most one current certificate per domain; each stored by a
// granted term of the renewer. (That they were stored in token order is
// checkWrites's: certificates are among the renewer's logged writes, in
// commit order, where their ids are only the order of their inserts.)
func (k *checker) checkCerts(ctx context.Context, f *facts, issued map[string]int) (CertStats, error) {
	var s CertStats
	rows, err := k.pool.Query(ctx, `SELECT id, domain, current, token, instance FROM certrenew_certificates ORDER BY id`)
	if err != nil {
		return s, err
	}
	type crt struct {
		ID       int64
		Domain   string
		Current  bool
		Token    int64
		Instance string
	}
	crts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[crt])
	if err != nil {
		return s, err
	}
	current := map[string]int{}
	for _, c := range crts {
		s.Stored++
		if c.Current {
			current[c.Domain]++
		}
		if !f.granted(JobCerts, c.Token, c.Instance) {
			k.violate(InvCerts, "certificate %d of %s stored with token %d by %s: not a term of %s granted to it", c.ID, c.Domain, c.Token, c.Instance, JobCerts)
		}
	}
	for d, n := range current {
		if n > 1 {
			k.violate(InvCerts, "%s has %d current certificates", d, n)
		}
	}
	s.Domains = len(current)
	storedFor := map[string]int{}
	for _, c := range crts {
		storedFor[c.Domain]++
	}
	for d, n := range issued {
		s.Issued += n
		if n > storedFor[d] {
			s.Unstored = append(s.Unstored, fmt.Sprintf("%s (%d issued, %d stored)", d, n, storedFor[d]))
		}
		if n > 1 {
			s.DuplicateIssued += n - 1
		}
	}
	slices.Sort(s.Unstored)
	if err := k.pool.QueryRow(ctx, `SELECT count(*) FROM custom_domains d WHERE added_at < now() - interval '60 seconds'
		AND NOT EXISTS (SELECT 1 FROM certrenew_certificates c WHERE c.domain = d.domain AND c.current)`).Scan(&s.WithoutAfter60s); err != nil {
		return s, err
	}
	if err := k.pool.QueryRow(ctx, `SELECT count(*) FROM certrenew_certificates c
		JOIN certrenew_order_urls i ON i.order_id = c.order_id WHERE i.token <> c.token`).Scan(&s.Recovered); err != nil {
		return s, err
	}
	return s, nil
}
