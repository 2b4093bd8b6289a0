package weeklyreport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/slots"
)

// RebuildConfig is what RebuildRun needs to fence an operator's rebuild.
type RebuildConfig struct {
	Pool *pgxpool.Pool
	// Job is the weeklyreport job as configured: its coordination mode says
	// what the rebuild is fenced with, and in database mode its schedule
	// names the week's slot.
	Job configs.Job
	// Week is the ISO week to rebuild, e.g. "2026-W47".
	Week string
	// Operator names who rebuilds (e.g. "operator@host"): it is recorded as
	// the instance that wrote the content, and the fence records the write as
	// RebuildHolder(Operator).
	Operator string
	// LeaderToken returns a token newer than every term of the job
	// (leadership.FreshToken). It is called in leader mode only: a
	// database-mode rebuild needs no etcd.
	LeaderToken func(context.Context) (int64, error)
	Log         *slog.Logger // nil: discarded
}

// rebuildHolderPrefix starts the fence holder of every operator's rebuild, so
// that a write refused because of a rebuild can be told from one refused
// because of a newer term (see RebuiltBy).
const rebuildHolderPrefix = "report rebuild by "

// RebuildHolder is the holder the fence records for a rebuild by operator: it
// is what fencing_tokens.holder shows, and what a *fencing.StaleTokenError
// names, when a run of the job is refused after the rebuild.
func RebuildHolder(operator string) string { return rebuildHolderPrefix + operator }

// RebuiltBy reports whether err is a write refused because an operator's
// rebuild has written to the resource with a newer token (rather than a newer
// term or claim of the job), and if so, which operator.
func RebuiltBy(err error) (operator string, ok bool) {
	var stale *fencing.StaleTokenError
	if !errors.As(err, &stale) {
		return "", false
	}
	return strings.CutPrefix(stale.Holder, rebuildHolderPrefix)
}

// RebuildRun returns the Run that Rebuild of c.Week is to be given for an
// operator's rebuild of job c.Job: a token newer than every write so far to
// the resource the job's own runs of that week write through, on that
// resource, so that the fence orders the rebuild against them.
//
//   - Leader mode: the job's resource (its name), with c.LeaderToken's token,
//     newer than every term of the job: the current leader's next write to the
//     resource is refused and it takes a new term (newer than the rebuild).
//   - Database mode (coordination: database): the resource of the week's slot,
//     "<job>@<slot>" as the scheduler names it, where the slot is the first of
//     the job's schedule at or after the end of the stored week (the slot
//     that reports it), with a token from the cron_claim_tokens sequence that
//     the slot's claims are taken from. The token is newer than every claim
//     of the slot so far, so a claimer whose claim is older than the rebuild
//     is refused if it writes after it; and every later claim takes a newer
//     one, so a run of the slot claimed after the rebuild is never refused
//     because of it. No etcd is involved.
//
// It returns ErrNotFound (wrapped) if, in database mode, the week is not
// stored, and an error if the job's schedule has no slot reporting the stored
// week (the schedule or time zone changed since the week was stored: rebuild
// with a config that has the schedule that stored it).
func RebuildRun(ctx context.Context, c RebuildConfig) (*scheduler.Run, error) {
	if _, err := parseWeek(c.Week); err != nil {
		return nil, fmt.Errorf("weeklyreport: rebuild: %w", err)
	}
	rc := scheduler.RunConfig{
		Job: c.Job.Name, Instance: c.Operator, Log: c.Log,
		Fence: fencing.New(c.Pool, RebuildHolder(c.Operator)),
	}
	if c.Job.Mode() == configs.ModeDatabase {
		slot, err := slotOfWeek(ctx, c.Pool, c.Job, c.Week)
		if err != nil {
			return nil, fmt.Errorf("weeklyreport: rebuild %s: %w", c.Week, err)
		}
		// Taken last, just before the write: a claim of the slot taken after
		// the token that writes first refuses the rebuild (nothing changes;
		// run it again), so the window is kept short.
		if err := c.Pool.QueryRow(ctx, `SELECT nextval('cron_claim_tokens')`).Scan(&rc.Token); err != nil {
			return nil, fmt.Errorf("weeklyreport: rebuild %s: take a claim token: %w", c.Week, err)
		}
		rc.Slot, rc.Resource = slot, slots.Resource(c.Job.Name, slot)
		return scheduler.NewRun(rc), nil
	}
	if c.LeaderToken == nil {
		return nil, fmt.Errorf("weeklyreport: rebuild %s: job %s is in leader mode and no way to take a token from etcd was given", c.Week, c.Job.Name)
	}
	token, err := c.LeaderToken(ctx)
	if err != nil {
		return nil, fmt.Errorf("weeklyreport: rebuild %s: take a token newer than every term of %s: %w", c.Week, c.Job.Name, err)
	}
	rc.Token = token
	return scheduler.NewRun(rc), nil
}

// slotOfWeek returns the slot of spec's schedule that reports week: the first
// at or after the end of the stored week. It checks that the slot reports
// that week in the stored report's time zone.
func slotOfWeek(ctx context.Context, q Querier, spec configs.Job, week string) (time.Time, error) {
	var end time.Time
	var zone string
	err := q.QueryRow(ctx, `SELECT week_end, time_zone FROM weekly_reports WHERE week = $1`, week).Scan(&end, &zone)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, fmt.Errorf("%w for week %s: rebuild replaces a stored report and never creates one", ErrNotFound, week)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read stored week %s: %w", week, err)
	}
	if spec.Schedule.Spec == nil {
		return time.Time{}, fmt.Errorf("job %s has no cron schedule to find the week's slot in", spec.Name)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored week %s: time zone %q: %w", week, zone, err)
	}
	// Next gives the first time after its argument, to the second.
	slot := spec.Schedule.Spec.Next(end.Add(-time.Nanosecond))
	if slot.IsZero() {
		return time.Time{}, fmt.Errorf("job %s's schedule %q has no slot after %s, the end of week %s",
			spec.Name, spec.Schedule.Cron, end.Format(time.RFC3339), week)
	}
	s, err := weekBefore(slot, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("slot %s: %w", slot.Format(time.RFC3339), err)
	}
	if s.label != week {
		return time.Time{}, fmt.Errorf("job %s's schedule %q (%s) has no slot in the week after %s (%s): its first slot after the week's end, %s, reports %s; "+
			"the schedule or time zone has changed since the week was stored: rebuild with a config that has the schedule that stored it",
			spec.Name, spec.Schedule.Cron, spec.Schedule.Location, week, zone, slot.Format(time.RFC3339), s.label)
	}
	return slot, nil
}
