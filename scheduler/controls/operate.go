package controls

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/slots"
)

// PauseJob pauses job, recording who (by), when (the database's clock) and why.
// A job already paused keeps its pause (its author, time and reason): it is
// returned with already true. Text longer than its cap (MaxBy, MaxReason) is
// a *TextTooLongError.
func PauseJob(ctx context.Context, pool *pgxpool.Pool, job, by, reason string) (p Pause, already bool, err error) {
	var inserted bool
	err = pool.QueryRow(ctx, `WITH ins AS (
			INSERT INTO job_pauses (job, paused_by, reason) VALUES ($1, $2, $3) ON CONFLICT (job) DO NOTHING
			RETURNING job, paused_by, paused_at, reason)
		SELECT job, paused_by, paused_at, reason, true FROM ins
		UNION ALL SELECT job, paused_by, paused_at, reason, false FROM job_pauses WHERE job = $1 AND NOT EXISTS (SELECT FROM ins)`,
		job, by, reason).Scan(&p.Job, &p.By, &p.Since, &p.Reason, &inserted)
	if err != nil {
		return p, false, fmt.Errorf("pause %s: %w", job, tooLong(err))
	}
	return p, !inserted, nil
}

// Resumed is what ResumeJob did.
type Resumed struct {
	// Pause is the pause lifted; WasPaused is false when the job was not
	// paused (nothing was done).
	Pause     Pause
	WasPaused bool
	// Until is the database's clock at the resume: the pause spanned
	// (Pause.Since, Until].
	Until time.Time
	// Due is how many cron slots fell due in the pause (0 for other
	// schedules); Skipped is how many of them were recorded skipped (at most
	// the newest 10,000; none with catch-up, nor those already recorded),
	// First and Last the oldest and newest of the slots due.
	Due, Skipped int
	First, Last  time.Time
}

// ResumeJob lifts spec's job's pause. The cron slots that fell due while it was
// paused are recorded skipped first, in the same transaction (at most the
// newest 10,000, with token 0 and no instance: skipped by an operator, not
// claimed by any instance; their error says by whom), unless catchUp: the
// catch-up sweep then runs them by the job's catch_up policy, as slots missed
// while nobody ran the job.
func ResumeJob(ctx context.Context, pool *pgxpool.Pool, spec configs.Job, by string, catchUp bool) (Resumed, error) {
	var r Resumed
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		r = Resumed{}
		p := &r.Pause
		err := tx.QueryRow(ctx, `SELECT job, paused_by, paused_at, reason, now() FROM job_pauses WHERE job = $1 FOR UPDATE`,
			spec.Name).Scan(&p.Job, &p.By, &p.Since, &p.Reason, &r.Until)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		r.WasPaused = true
		if spec.Schedule.Kind == configs.Cron {
			due, total := slots.Between(spec.Schedule, p.Since, r.Until)
			r.Due = total
			if len(due) > 0 {
				r.First, r.Last = due[0], due[len(due)-1]
			}
			if !catchUp && len(due) > 0 {
				tag, err := tx.Exec(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance, finished_at, error)
					SELECT $1, slot, 'skipped', 0, '', now(), $3 FROM unnest($2::timestamptz[]) AS slot
					ON CONFLICT (job, slot) DO NOTHING`, spec.Name, due, SkipText(*p, by))
				if err != nil {
					return fmt.Errorf("record the slots due while paused as skipped: %w", err)
				}
				r.Skipped = int(tag.RowsAffected())
			}
		}
		_, err = tx.Exec(ctx, `DELETE FROM job_pauses WHERE job = $1`, spec.Name)
		return err
	})
	if err != nil {
		return r, fmt.Errorf("resume %s: %w", spec.Name, err)
	}
	return r, nil
}

// SkipText is the error text of a cron slot skipped because its job was
// paused (cron_slots.error), resumed by resumedBy.
func SkipText(p Pause, resumedBy string) string {
	s := "paused by " + p.By + " at " + p.Since.UTC().Format(time.RFC3339)
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s + " (skipped at its resume by " + resumedBy + ")"
}

// DrainInstance drains instance, recording who, when and why. An instance already
// drained keeps its drain: it is returned with already true. Text longer than
// its cap (MaxBy, MaxReason) is a *TextTooLongError.
func DrainInstance(ctx context.Context, pool *pgxpool.Pool, instance, by, reason string) (d Drain, already bool, err error) {
	var inserted bool
	err = pool.QueryRow(ctx, `WITH ins AS (
			INSERT INTO instance_drains (instance, drained_by, reason) VALUES ($1, $2, $3) ON CONFLICT (instance) DO NOTHING
			RETURNING instance, drained_by, drained_at, reason)
		SELECT instance, drained_by, drained_at, reason, true FROM ins
		UNION ALL SELECT instance, drained_by, drained_at, reason, false FROM instance_drains WHERE instance = $1 AND NOT EXISTS (SELECT FROM ins)`,
		instance, by, reason).Scan(&d.Instance, &d.By, &d.Since, &d.Reason, &inserted)
	if err != nil {
		return d, false, fmt.Errorf("drain %s: %w", instance, tooLong(err))
	}
	return d, !inserted, nil
}

// UndrainInstance lifts instance's drain and returns it; was is false when it was
// not drained.
func UndrainInstance(ctx context.Context, q Querier, instance string) (d Drain, was bool, err error) {
	err = q.QueryRow(ctx, `DELETE FROM instance_drains WHERE instance = $1 RETURNING instance, drained_by, drained_at, reason`,
		instance).Scan(&d.Instance, &d.By, &d.Since, &d.Reason)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return d, false, nil
	case err != nil:
		return d, false, fmt.Errorf("undrain %s: %w", instance, err)
	}
	return d, true, nil
}
