package scheduler

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/sleep"
)

// The scheduler's records are a history, not a ledger: left alone they grow
// for ever (a job that runs every second adds 86,400 rows of job_runs a day).
// Every instance keeps them bounded, the same way for every job, whoever ran
// it; deletes of the same rows by two instances at once are harmless.
const (
	// KeepRuns is how many of each job's newest runs job_runs keeps.
	KeepRuns = 1000
	// KeepHistory is how long job_terms, fence_rejections, finished cron
	// slots and manual runs that are over are kept. A cron job's newest slot is always kept (the catch-up
	// sweep starts from it), and no slot inside a job's catch-up window is
	// deleted: see Scheduler.pruneOnce.
	KeepHistory = 30 * 24 * time.Hour
	// pruneEvery is the pace of the pruning, jittered by a quarter; a
	// delete removes at most 5,000 rows, so no pass holds locks long.
	pruneEvery = 10 * time.Minute
)

// The pruning statements, each deleting at most pruneBatch rows. Ages are in
// seconds. A term whose end was never recorded (its process was killed) goes
// once it is old and a later term of its job exists.
const (
	sqlPruneRuns = `DELETE FROM job_runs WHERE id IN (
		SELECT id FROM job_runs WHERE job = $1 AND id < (
			SELECT id FROM job_runs WHERE job = $1 ORDER BY id DESC OFFSET $2 - 1 LIMIT 1)
		ORDER BY id LIMIT 5000)`
	sqlPruneSlots = `DELETE FROM cron_slots WHERE job = $1 AND slot IN (
		SELECT slot FROM cron_slots WHERE job = $1 AND state <> 'running'
			AND slot < now() - make_interval(secs => $2)
			AND slot < (SELECT max(slot) FROM cron_slots WHERE job = $1)
		ORDER BY slot LIMIT 5000)`
	sqlPruneTerms = `DELETE FROM job_terms WHERE ctid IN (
		SELECT ctid FROM job_terms t WHERE t.started_at < now() - make_interval(secs => $1)
			AND (t.ended_at IS NOT NULL OR EXISTS (SELECT 1 FROM job_terms n WHERE n.job = t.job AND n.token > t.token))
		LIMIT 5000)`
	sqlPruneRejections = `DELETE FROM fence_rejections WHERE ctid IN (
		SELECT ctid FROM fence_rejections WHERE at < now() - make_interval(secs => $1) LIMIT 5000)`
	// Manual runs that are over (their reports go with them); an open one
	// stays, however old.
	sqlPruneManualRuns = `DELETE FROM manual_runs WHERE id IN (
		SELECT id FROM manual_runs WHERE state IN ('done', 'failed')
			AND coalesce(finished_at, requested_at) < now() - make_interval(secs => $1) LIMIT 5000)`
)

// keepHistory prunes the records every pruneEvery until ctx ends.
func (s *Scheduler) keepHistory(ctx context.Context) {
	pool := s.cfg.Records
	if pool == nil {
		pool = s.cfg.Pool
	}
	if pool == nil {
		return
	}
	for {
		jitter := time.Duration(rand.Int64N(int64(pruneEvery / 4)))
		if !sleep.For(ctx, pruneEvery-pruneEvery/8+jitter) {
			return
		}
		s.pruneOnce(ctx)
	}
}

// pruneOnce runs one pass of every pruning statement, each bounded by a
// minute and 5,000 rows; a failure is logged and left to the next pass.
func (s *Scheduler) pruneOnce(ctx context.Context) (deleted int64) {
	pool := s.cfg.Records
	if pool == nil {
		pool = s.cfg.Pool
	}
	exec := func(sql string, args ...any) {
		qctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		tag, err := pool.Exec(qctx, sql, args...)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "42501" && s.pruneDenied.CompareAndSwap(false, true):
			s.log.Warn("the runtime role may not prune the scheduler's history (job_runs, job_terms, cron_slots, fence_rejections, manual_runs): "+
				"run snip-jobs migrate --grant-to with this release (docs/operations.md, \"Database roles\")", "err", err)
			return
		case err != nil:
			s.log.Debug("pruning the history failed; the next pass tries again", "err", err)
			return
		}
		deleted += tag.RowsAffected()
	}
	for _, j := range s.jobs {
		exec(sqlPruneRuns, j.spec.Name, KeepRuns)
		if j.spec.Schedule.Kind == configs.Cron {
			keep := max(KeepHistory, j.spec.Schedule.CatchUpWindow+24*time.Hour)
			exec(sqlPruneSlots, j.spec.Name, keep.Seconds())
		}
	}
	exec(sqlPruneTerms, KeepHistory.Seconds())
	exec(sqlPruneRejections, KeepHistory.Seconds())
	exec(sqlPruneManualRuns, KeepHistory.Seconds())
	if deleted > 0 {
		s.log.Info("pruned the history", "rows", deleted, "keep_runs", KeepRuns, "keep", KeepHistory)
	}
	return deleted
}
