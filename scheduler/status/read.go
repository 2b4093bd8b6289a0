package status

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/controls"
)

// Source is where Read reads from.
type Source struct {
	// Leadership reads the leadership backend; nil when the config needs
	// none (no job led through terms): then no leader and no instance is
	// read. Package clusterview has one for each backend.
	Leadership LeadershipReader
	// Pool is nil without a database: then no last run or slot is read.
	Pool *pgxpool.Pool
	// Jobs are the config file's jobs, in its order.
	Jobs []configs.Job
}

// Leadership is what a leadership backend says of the cluster.
type Leadership struct {
	Backend string // "etcd" or "kubernetes"
	// Leaders by job; nil when they could not be read.
	Leaders map[string]Leader
	// Instances are the instances the backend lists; Read fills in Leads.
	Instances []Instance
}

// LeadershipReader reads a backend once. With an error it returns what it
// could read: Read shows that and lists the error.
type LeadershipReader func(ctx context.Context) (Leadership, error)

// Read reads the cluster's state of src's jobs from the leadership backend
// (each singleton's leader, the instances that are up) and PostgreSQL (each
// job's last run and last cron slot). What cannot be read is listed in
// Errors, one problem each; the rest is filled in.
func Read(ctx context.Context, src Source) Cluster {
	c := Cluster{Instances: []Instance{}, Jobs: make([]Job, 0, len(src.Jobs))}
	fail := func(err error) {
		for _, e := range splitJoined(err) {
			c.Errors = append(c.Errors, e.Error())
		}
	}
	var ls Leadership
	if src.Leadership != nil {
		var err error
		if ls, err = src.Leadership(ctx); err != nil {
			fail(err)
		}
		c.Backend, c.LeadersKnown = ls.Backend, ls.Leaders != nil
	}
	var ctl controls.State
	if src.Pool != nil {
		var err error
		if ctl, err = controls.Read(ctx, src.Pool); err != nil {
			fail(err)
		}
	}
	c.Drained = drains(ctl)
	leads := map[string]int{}
	for _, spec := range src.Jobs {
		j := Describe(spec)
		if p, ok := ctl.Paused(spec.Name); ok {
			j.Paused = &p
		}
		if r, ok := ctl.Open[spec.Name]; ok {
			j.ManualRun = &r
		}
		if l, ok := ls.Leaders[spec.Name]; ok {
			j.Leader = &l
			j.Leading, j.Token, j.Since = true, l.Token, l.Since
			leads[l.Instance]++
		}
		if src.Pool != nil {
			if err := readLast(ctx, src.Pool, &j); err != nil {
				fail(err)
			}
		}
		c.Jobs = append(c.Jobs, j)
	}
	for _, in := range ls.Instances {
		in.Leads = leads[in.Name]
		if d, ok := ctl.Drained(in.Name); ok {
			in.Drained = &d
		}
		c.Instances = append(c.Instances, in)
	}
	return c
}

// drains lists the drained instances, by name.
func drains(ctl controls.State) []controls.Drain {
	out := []controls.Drain{}
	for _, d := range ctl.Drains {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b controls.Drain) int { return strings.Compare(a.Instance, b.Instance) })
	return out
}

// splitJoined undoes errors.Join, so that each problem is reported on its own.
func splitJoined(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, splitJoined(e)...)
	}
	return out
}

// readLast reads the job's last run (job_runs) and last cron slot (cron_slots).
func readLast(ctx context.Context, pool *pgxpool.Pool, j *Job) error {
	var r RunRecord
	var slot, finished *time.Time
	var result, msg *string
	err := pool.QueryRow(ctx, `SELECT id, instance, token, slot, trigger, started_at, finished_at, result, error, coalesce(pid, 0)
		FROM job_runs WHERE job = $1 ORDER BY id DESC LIMIT 1`, j.Name).
		Scan(&r.ID, &r.Instance, &r.Token, &slot, &r.Trigger, &r.Started, &finished, &result, &msg, &r.PID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("last run of %s: %w", j.Name, err)
	default:
		r.Slot, r.Finished, r.Result, r.Error = deref(slot), deref(finished), deref(result), deref(msg)
		j.LastRun = &r
	}
	var sr SlotRecord
	err = pool.QueryRow(ctx, `SELECT slot, state, token, instance, attempts, finished_at, error
		FROM cron_slots WHERE job = $1 ORDER BY slot DESC LIMIT 1`, j.Name).
		Scan(&sr.Slot, &sr.State, &sr.Token, &sr.Instance, &sr.Attempts, &finished, &msg)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("last slot of %s: %w", j.Name, err)
	default:
		sr.Finished, sr.Error = deref(finished), deref(msg)
		j.LastSlot = &sr
	}
	return nil
}

// Runs reads job's newest runs from job_runs, newest first, at most limit of
// them, and how many runs of the job job_runs holds (each job's newest 1,000
// are kept, and up to ten minutes' more until the next pruning). A run
// without Finished and Result has no recorded end: it is still running, or
// its instance died (or lost the database) before recording it.
func Runs(ctx context.Context, pool *pgxpool.Pool, job string, limit int) (runs []RunRecord, recorded int64, err error) {
	rows, err := pool.Query(ctx, `SELECT id, instance, token, slot, trigger, started_at, finished_at, result, error, coalesce(pid, 0), count(*) OVER ()
		FROM job_runs WHERE job = $1 ORDER BY id DESC LIMIT $2`, job, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("runs of %s: %w", job, err)
	}
	runs = []RunRecord{}
	var r RunRecord
	var slot, finished *time.Time
	var result, msg *string
	if _, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Instance, &r.Token, &slot, &r.Trigger, &r.Started, &finished, &result, &msg, &r.PID, &recorded}, func() error {
		r.Slot, r.Finished, r.Result, r.Error = deref(slot), deref(finished), deref(result), deref(msg)
		runs = append(runs, r)
		return nil
	}); err != nil {
		return nil, 0, fmt.Errorf("runs of %s: %w", job, err)
	}
	return runs, recorded, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// History reads the terms that overlap [since, now] and the refused writes
// after since, oldest first. A term whose end nobody recorded (its instance
// died, and its successor's record failed too) ends, for this purpose, when
// its successor started.
//
// A term its instance handed over (HandOverReasons: resigned while it held)
// ends no later than its successor's start: it records its end after
// resigning, so that write may land after the successor's. Noticed is kept
// for the other terms when it is later than their end: an instance paused or
// cut off noticed late that its term had ended.
func History(ctx context.Context, pool *pgxpool.Pool, since time.Time) ([]TermRecord, []Rejection, error) {
	// A term never closed is either running (the job's newest) or was lost with
	// its instance, in which case its successor's start bounds it.
	rows, err := pool.Query(ctx, `SELECT t.job, t.token, t.instance, t.started_at,
			CASE WHEN t.reason = ANY ($2) THEN least(t.ended_at, next.started_at) ELSE t.ended_at END,
			coalesce(t.reason, ''), coalesce(t.ended_by, ''),
			CASE WHEN t.reason = ANY ($2) OR t.noticed_at <= t.ended_at THEN NULL ELSE t.noticed_at END
		FROM job_terms t,
		LATERAL (SELECT min(n.started_at) AS started_at FROM job_terms n WHERE n.job = t.job AND n.token > t.token) next
		WHERE t.ended_at >= $1
		   OR (t.ended_at IS NULL AND coalesce(next.started_at, 'infinity') >= $1)
		ORDER BY t.started_at, t.token`, since, HandOverReasons)
	if err != nil {
		return nil, nil, fmt.Errorf("read term history: %w", err)
	}
	var terms []TermRecord
	var t TermRecord
	var ended, noticed *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&t.Job, &t.Token, &t.Instance, &t.Started, &ended, &t.Reason, &t.EndedBy, &noticed}, func() error {
		t.Ended, t.Noticed = deref(ended), deref(noticed)
		terms = append(terms, t)
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("read term history: %w", err)
	}
	rows, err = pool.Query(ctx, `SELECT resource, token, current, instance, at FROM fence_rejections WHERE at >= $1 ORDER BY at`, since)
	if err != nil {
		return nil, nil, fmt.Errorf("read refused writes: %w", err)
	}
	rejections, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Rejection])
	if err != nil {
		return nil, nil, fmt.Errorf("read refused writes: %w", err)
	}
	return terms, rejections, nil
}
