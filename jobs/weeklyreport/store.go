package weeklyreport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/scheduler"
)

// ErrNotFound is returned (wrapped) by Show, Print and Rebuild when no report
// is stored for the week asked for, or none at all.
var ErrNotFound = errors.New("weeklyreport: no stored report")

// Querier is what Show and Print read through: a *pgxpool.Pool, *pgx.Conn or
// pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const showColumns = `week, job, token, instance, body, body_text, body_csv, created_at, replaced_at, replacements`

// Show returns the stored report of week ("2026-W47"), or the latest stored
// week's if week is "".
func Show(ctx context.Context, q Querier, week string) (*Report, error) {
	var row pgx.Row
	if week == "" {
		row = q.QueryRow(ctx, `SELECT `+showColumns+` FROM weekly_reports ORDER BY week_start DESC LIMIT 1`)
	} else {
		if _, err := parseWeek(week); err != nil {
			return nil, fmt.Errorf("weeklyreport: %w", err)
		}
		row = q.QueryRow(ctx, `SELECT `+showColumns+` FROM weekly_reports WHERE week = $1`, week)
	}
	var (
		label    string
		body     []byte
		st       Stored
		replaced *time.Time
	)
	err := row.Scan(&label, &st.Job, &st.Token, &st.Instance, &body, &st.Text, &st.CSV, &st.CreatedAt, &replaced, &st.Replacements)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && week == "":
		return nil, fmt.Errorf("%w: no week has been reported yet", ErrNotFound)
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("%w for week %s", ErrNotFound, week)
	case err != nil:
		return nil, fmt.Errorf("weeklyreport: read stored report: %w", err)
	}
	r := new(Report)
	if err := json.Unmarshal(body, r); err != nil {
		return nil, fmt.Errorf("weeklyreport: stored report %s: decode body: %w", label, err)
	}
	if replaced != nil {
		st.ReplacedAt = *replaced
	}
	r.Stored = st
	return r, nil
}

// Print writes the stored report of week ("" = the latest) to w as
// `snip-jobs report show` prints it: a line saying where it comes from, then
// its stored text, which is what the mailer sends.
func Print(ctx context.Context, q Querier, w io.Writer, week string) error {
	r, err := Show(ctx, q, week)
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, r.header()+"\n"+r.Stored.Text)
	if err != nil {
		return fmt.Errorf("weeklyreport: print %s: %w", r.Week, err)
	}
	return nil
}

// header is the line Print puts before the report.
func (r *Report) header() string {
	const stamp = "2006-01-02 15:04:05 MST"
	st := r.Stored
	h := fmt.Sprintf("# %s: stored by job %s, created %s", r.Week, st.Job, st.CreatedAt.UTC().Format(stamp))
	if st.Replacements > 0 {
		h += fmt.Sprintf(", replaced %d %s (last %s)", st.Replacements, plural(st.Replacements, "time", "times"),
			st.ReplacedAt.UTC().Format(stamp))
	}
	return h + fmt.Sprintf("; content written by %s with token %d\n", st.Instance, st.Token)
}

// Rebuild is the operator's re-run of a week that is already stored: in one
// transaction fenced by run (a run of the job that stored the week), it builds
// the week's report again from the current counts, with the time zone and
// options recorded in the stored report, and replaces the stored body, text
// and CSV, recording run's token and instance, replaced_at and one more
// replacement. It never adds a report or an outbox row: a week that is not
// stored gives ErrNotFound (missed weeks are the scheduler's catch-up), and
// the week's outbox row is left as it is, so a replaced report is not mailed
// again; if it has not been sent yet, the mailer sends the replaced content.
func Rebuild(ctx context.Context, run *scheduler.Run, week string) error {
	monday, err := parseWeek(week)
	if err != nil {
		return fmt.Errorf("weeklyreport: rebuild: %w", err)
	}
	var rep *Report
	var changed bool
	err = run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var job, zone, oldText string
		var oldBody []byte
		err := tx.QueryRow(ctx, `SELECT job, time_zone, body, body_text FROM weekly_reports WHERE week = $1 FOR UPDATE`, week).
			Scan(&job, &zone, &oldBody, &oldText)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w for week %s: rebuild replaces a stored report and never creates one", ErrNotFound, week)
		}
		if err != nil {
			return fmt.Errorf("read stored week %s: %w", week, err)
		}
		if job != run.Job {
			return fmt.Errorf("week %s was stored by job %s: rebuild it with a run of that job, whose writes are fenced on its own resource", week, job)
		}
		var old Report
		if err := json.Unmarshal(oldBody, &old); err != nil {
			return fmt.Errorf("stored week %s: decode body: %w", week, err)
		}
		if err := old.Options.Validate(); err != nil {
			return fmt.Errorf("stored week %s: options: %w", week, err)
		}
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return fmt.Errorf("stored week %s: time zone %q: %w", week, zone, err)
		}
		s, err := weekStarting(monday, loc)
		if err != nil {
			return err
		}
		rep, err = build(ctx, tx, s, old.Options)
		if err != nil {
			return err
		}
		run.Progress()
		body, text, csv, err := encode(rep)
		if err != nil {
			return err
		}
		changed = text != oldText
		_, err = tx.Exec(ctx, `UPDATE weekly_reports
			SET body = $2, body_text = $3, body_csv = $4, token = $5, instance = $6,
				replaced_at = now(), replacements = replacements + 1
			WHERE week = $1`, week, body, text, csv, run.Token, run.Instance)
		if err != nil {
			return fmt.Errorf("replace week %s: %w", week, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("weeklyreport: rebuild %s: %w", week, err)
	}
	run.Log.InfoContext(ctx, "weekly report rebuilt and replaced (not mailed again)",
		"week", week, "total_clicks", rep.Total, "changed", changed)
	return nil
}
