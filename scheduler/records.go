package scheduler

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/scheduler/status"
)

// recordStart logs the start of a run in job_runs (best-effort: a database
// outage must not stop jobs that do not need it). It gives up when ctx (the
// run's) ends: a run whose term is over does nothing worth recording, and a
// slow database must not keep a job from returning within its grace period.
func (s *Scheduler) recordStart(ctx context.Context, j *job, r *Run) *status.RunRecord {
	rec := &status.RunRecord{Instance: s.instance, Token: r.Token, Slot: r.Slot, Started: time.Now()}
	if records := s.records(); records != nil {
		bctx, cancel := context.WithTimeout(ctx, recordTimeout)
		defer cancel()
		var slot *time.Time
		if !r.Slot.IsZero() {
			slot = &r.Slot
		}
		err := records.QueryRow(bctx, sqlRunStart,
			j.spec.Name, s.instance, r.Token, slot).Scan(&rec.ID)
		if err != nil {
			r.Log.Debug("cannot log the run's start", "err", err)
		}
	}
	j.mu.Lock()
	j.last = rec
	j.mu.Unlock()
	return rec
}

// The statements of the scheduler's own records.
const (
	sqlTermStart = `INSERT INTO job_terms (job, token, instance) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
	sqlTermEnd   = `UPDATE job_terms SET ended_at = now(), reason = $3 WHERE job = $1 AND token = $2`
	sqlRunStart  = `INSERT INTO job_runs (job, instance, token, slot) VALUES ($1, $2, $3, $4) RETURNING id`
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

// recordFinish logs the end of a run: at once in memory (status), and in
// job_runs in the background, so that the run's caller — and the end of a term
// waiting for its job — never waits on that write (over a slow database link
// it could take longer than the job's grace). Run waits for these writes
// before it returns.
func (s *Scheduler) recordFinish(j *job, rec *status.RunRecord, result string, runErr error) {
	done := *rec
	done.Finished, done.Result = time.Now(), result
	if runErr != nil {
		done.Error = runErr.Error()
	}
	j.mu.Lock()
	j.last = &done
	j.mu.Unlock()
	records := s.records()
	if records == nil || rec.ID == 0 {
		return
	}
	var msg *string
	if runErr != nil {
		msg = &done.Error
	}
	s.recordWrites.Go(func() {
		bctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
		defer cancel()
		if _, err := records.Exec(bctx, sqlRunEnd,
			rec.ID, result, msg); err != nil {
			j.log.Debug("cannot log the run's end", "run", rec.ID, "err", err)
		}
	})
}
