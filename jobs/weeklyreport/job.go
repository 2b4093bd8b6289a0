package weeklyreport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler"
)

// Options are the settings of a weeklyreport job (the config's options:). The
// time zone of the weeks is not among them: it is the job's timezone:, the
// zone its cron spec is read in, so that "Monday 08:00" and "the week that
// ended at Monday 00:00" are always in the same calendar.
type Options struct {
	// Top is how many links the top list holds. Default 10.
	Top int `yaml:"top" json:"top"`
	// Growth is how many links each growth list holds; 0 leaves both out.
	// Default 10.
	Growth int `yaml:"growth" json:"growth"`
	// GrowthMinPrevious is how many clicks a link needs in the week before to
	// be ranked by relative growth (from 1 to 5 clicks is +400 %, which says
	// little). Default 10.
	GrowthMinPrevious int64 `yaml:"growth_min_previous" json:"growth_min_previous"`
}

// Limits of the options.
const (
	MaxTop    = 1000
	MaxGrowth = 1000
)

// DefaultOptions returns the options a job gets when its config sets none.
func DefaultOptions() Options {
	return Options{Top: 10, Growth: 10, GrowthMinPrevious: 10}
}

// Validate reports every option out of range.
func (o *Options) Validate() error {
	var errs []error
	if o.Top < 1 || o.Top > MaxTop {
		errs = append(errs, fmt.Errorf("top must be from 1 to %d, not %d", MaxTop, o.Top))
	}
	if o.Growth < 0 || o.Growth > MaxGrowth {
		errs = append(errs, fmt.Errorf("growth must be from 0 (no growth lists) to %d, not %d", MaxGrowth, o.Growth))
	}
	if o.GrowthMinPrevious < 1 {
		errs = append(errs, fmt.Errorf("growth_min_previous must be at least 1, not %d", o.GrowthMinPrevious))
	}
	return errors.Join(errs...)
}

// Type is the weeklyreport job type, for the scheduler's registry.
func Type() scheduler.Type {
	return scheduler.Type{
		Name:    "weeklyreport",
		Doc:     "stores the previous calendar week's click report once per week and queues it for the mailer",
		Options: configs.OptionsOf(DefaultOptions),
		New:     newJob,
		Modes:   []configs.Mode{configs.ModeLeader, configs.ModeDatabase},
		ModeWhy: "its writes are fenced by the slot's token",
		// Monday 08:00 (in the entry's timezone, UTC without one); a
		// Monday missed while nobody ran the job is still reported, for up
		// to two weeks back.
		Defaults: configs.Defaults{Cron: DefaultCron, CatchUp: configs.All, CatchUpWindow: DefaultCatchUpWindow},
	}
}

// The schedule of a weeklyreport entry that sets none.
const (
	DefaultCron          = "0 8 * * MON"
	DefaultCatchUpWindow = 14 * 24 * time.Hour
)

// job is one configured weeklyreport job.
type job struct {
	loc  *time.Location
	opts Options
}

func newJob(_ scheduler.Env, spec configs.Job) (scheduler.Job, error) {
	if spec.Schedule.Kind != configs.Cron {
		return nil, fmt.Errorf("weeklyreport %q: needs a cron: schedule (e.g. cron: \"0 8 * * MON\"), not %s: "+
			"each run reports the week before its cron slot", spec.Name, spec.Schedule.Kind)
	}
	opts, err := configs.DecodeOptions(spec, DefaultOptions)
	if err != nil {
		return nil, err
	}
	loc := spec.Schedule.Location
	if loc == nil {
		loc = time.UTC
	}
	if err := checkZone(loc); err != nil {
		return nil, fmt.Errorf("weeklyreport %q: timezone: %w", spec.Name, err)
	}
	return &job{loc: loc, opts: opts}, nil
}

// Run stores the report of the week before r.Slot (for an operator's
// manual run, the week before now: the last whole week), its outbox row and
// the completion of the slot or the manual run in one fenced transaction, so
// that neither runs twice whatever fails after the commit. If the week is
// stored already (this slot ran before, or another slot, run or job stored
// it), it stores nothing and only completes the slot or the manual run.
func (j *job) Run(ctx context.Context, r *scheduler.Run) error {
	at := r.Slot
	if at.IsZero() {
		if r.ManualRun == 0 {
			return fmt.Errorf("weeklyreport: run of %s has no cron slot: the report's week is the one before the slot", r.Job)
		}
		at = time.Now()
	}
	s, err := weekBefore(at, j.loc)
	if err != nil {
		return fmt.Errorf("weeklyreport: week before %s: %w", at.Format(time.RFC3339), err)
	}
	log := r.Log.With("week", s.label)
	var o outcome
	err = r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) (err error) {
		o, err = j.store(ctx, tx, r, s)
		return err
	})
	if op, ok := RebuiltBy(err); ok {
		// The fence's last writer was the rebuild, not a newer term or claim.
		return fmt.Errorf("weeklyreport: week %s: refused because an operator's report rebuild (%s) has written "+
			"with a newer token since this run's term or claim began, not because another instance has: "+
			"the slot runs again with a newer token: %w", s.label, op, err)
	}
	switch {
	case err != nil:
		return fmt.Errorf("weeklyreport: week %s: %w", s.label, err)
	case o.stored != nil:
		log.InfoContext(ctx, "weekly report stored and queued for mail",
			"total_clicks", o.stored.Total, "time_zone", j.loc.String())
	case o.storedBy == r.Job:
		log.InfoContext(ctx, "week already stored; slot completed without a new report", "stored_token", o.storedToken)
	default:
		log.WarnContext(ctx, "week already stored by another job: two weeklyreport jobs share this database; keep one",
			"stored_by", o.storedBy, "stored_token", o.storedToken)
	}
	return nil
}

// outcome is what a run's transaction found and did.
type outcome struct {
	stored      *Report // set when this run stored the week
	storedBy    string  // else the job that had stored it
	storedToken int64
}

// store is a run's fenced transaction: the week's report and its outbox row
// unless the week is stored already, and the completion of the slot or the
// manual run, whichever it was.
func (j *job) store(ctx context.Context, tx pgx.Tx, r *scheduler.Run, s span) (outcome, error) {
	var o outcome
	err := tx.QueryRow(ctx, `SELECT job, token FROM weekly_reports WHERE week = $1`, s.label).Scan(&o.storedBy, &o.storedToken)
	switch {
	case err == nil:
		return o, r.Complete(ctx, tx)
	case !errors.Is(err, pgx.ErrNoRows):
		return o, fmt.Errorf("read stored week %s: %w", s.label, err)
	}
	rep, err := build(ctx, tx, s, j.opts)
	if err != nil {
		return o, err
	}
	r.Progress()
	body, text, csv, err := encode(rep)
	if err != nil {
		return o, err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO weekly_reports
		(week, job, time_zone, week_start, week_end, body, body_text, body_csv, token, instance)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (week) DO NOTHING`,
		s.label, r.Job, j.loc.String(), s.start(), s.end(), body, text, csv, r.Token, r.Instance)
	if err != nil {
		return o, fmt.Errorf("store week %s: %w", s.label, err)
	}
	if tag.RowsAffected() == 0 {
		// Another job, whose writes are fenced on another resource, stored
		// the week after our read: its insert decided.
		o.storedBy = "(another job, concurrently)"
		return o, r.Complete(ctx, tx)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO weekly_report_outbox (week, subject) VALUES ($1, $2)`,
		s.label, rep.Subject()); err != nil {
		return o, fmt.Errorf("queue mail for week %s: %w", s.label, err)
	}
	if err := r.Complete(ctx, tx); err != nil {
		return o, err
	}
	o.stored = rep
	return o, nil
}
