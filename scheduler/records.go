package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/scheduler/status"
)

// recorder writes the scheduler's own records (job_terms, job_runs,
// fence_rejections), best-effort: a database outage must not stop jobs that
// do not need it, and no write sits on the path of a term's hand-over.
type recorder struct {
	pool     *pgxpool.Pool // nil: nothing is recorded
	instance string
	log      *slog.Logger
	writes   sync.WaitGroup // the job_runs writes in flight (runFinish)
}

// bookkeep runs one best-effort statement of the scheduler's own records
// (job_terms, fence_rejections): bounded by a second, done even at shutdown,
// and its failure never stops a job.
func (rc *recorder) bookkeep(ctx context.Context, sql string, args ...any) {
	if rc.pool == nil {
		return
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if _, err := rc.pool.Exec(bctx, sql, args...); err != nil {
		rc.log.Debug("bookkeeping write failed", "err", err)
	}
}

// runStart logs the start of a run in job_runs. It gives up when ctx (the
// run's) ends: a run whose term is over does nothing worth recording, and a
// slow database must not keep a job from returning within its grace period.
func (rc *recorder) runStart(ctx context.Context, j *job, r *Run) *status.RunRecord {
	trigger := r.Trigger
	if trigger == "" { // a Run built without NewRun
		trigger = TriggerSchedule
	}
	rec := &status.RunRecord{Instance: rc.instance, Token: r.Token, Slot: r.Slot, Trigger: string(trigger), Started: time.Now()}
	if records := rc.pool; records != nil {
		bctx, cancel := context.WithTimeout(ctx, recordTimeout)
		defer cancel()
		var slot *time.Time
		if !r.Slot.IsZero() {
			slot = &r.Slot
		}
		err := records.QueryRow(bctx, sqlRunStart,
			j.spec.Name, rc.instance, r.Token, slot, rec.Trigger).Scan(&rec.ID)
		if err != nil {
			r.Log.Debug("cannot log the run's start", "err", err)
		}
		r.runID = rec.ID
	}
	j.update(func() { j.last = rec })
	return rec
}

// The statements of the scheduler's own records.
const (
	sqlTermStart = `INSERT INTO job_terms (job, token, instance) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
	sqlTermEnd   = `UPDATE job_terms SET ended_at = now(), reason = $3 WHERE job = $1 AND token = $2`
	sqlRunStart  = `INSERT INTO job_runs (job, instance, token, slot, trigger) VALUES ($1, $2, $3, $4, $5) RETURNING id`
	sqlRunEnd    = `UPDATE job_runs SET finished_at = now(), result = $2, error = $3 WHERE id = $1`
	sqlRejection = `INSERT INTO fence_rejections (resource, token, current, instance) VALUES ($1, $2, $3, $4)`
)

// WarmRecords prepares on conn the statements the scheduler writes its
// records with, under their own text as name, so that pgx uses them without a
// parse. Make it the AfterConnect hook of the Records pool (Config.Records):
// a record written on a fresh connection then costs one round trip, not the
// parse of a cold backend, which took 20–90 ms under load in the
// fault-injection runs (a successor's first record, before its job starts). A
// statement that cannot be prepared (its table not migrated yet) is parsed
// when first used instead: WarmRecords never fails a connection.
func WarmRecords(ctx context.Context, conn *pgx.Conn) error {
	for _, sql := range []string{sqlTermStart, sqlTermEnd, sqlRunStart, sqlRunEnd, sqlRejection} {
		if _, err := conn.Prepare(ctx, sql, sql); err != nil && ctx.Err() != nil {
			break
		}
	}
	return nil
}

// recordTimeout bounds each write to job_runs.
const recordTimeout = 5 * time.Second

// runFinish logs the end of a run: at once in memory (status), and in
// job_runs in the background, so that the run's caller — and the end of a term
// waiting for its job — never waits on that write (over a slow database link
// it could take longer than the job's grace). Scheduler.Run waits for these
// writes before it returns.
func (rc *recorder) runFinish(j *job, rec *status.RunRecord, result string, runErr error) {
	done := *rec
	done.Finished, done.Result = time.Now(), result
	if runErr != nil {
		done.Error = runErr.Error()
	}
	j.update(func() { j.last = &done })
	records := rc.pool
	if records == nil || rec.ID == 0 {
		return
	}
	var msg *string
	if runErr != nil {
		msg = &done.Error
	}
	rc.writes.Go(func() {
		bctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		defer cancel()
		if _, err := records.Exec(bctx, sqlRunEnd,
			rec.ID, result, msg); err != nil {
			j.log.Debug("cannot log the run's end", "run", rec.ID, "err", err)
		}
	})
}
