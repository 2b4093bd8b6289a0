package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/internal/boottime"
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

// errRunRefused is why a run's start was refused: its job has a newer term
// recorded (or its own term's end is), or a newer token has written to its
// resource. Its term is over, whatever this process believes.
var errRunRefused = fmt.Errorf("%w: a newer term of the job is recorded, or has written through the fence", ErrTermEnded)

// runStart records the start of a run in job_runs, unless the run's term is
// over as the records or the fence say (errRunRefused), or an operator holds
// the job back here (a *HeldError): then the run must not begin. A write
// that fails otherwise is logged and the run goes on: a slow or absent
// database must not stop jobs that do not need it. It gives up when ctx (the
// run's) ends.
func (rc *recorder) runStart(ctx context.Context, j *job, r *Run) (*status.RunRecord, error) {
	trigger := r.Trigger
	if trigger == "" { // a Run built without NewRun
		trigger = TriggerSchedule
	}
	rec := &status.RunRecord{Instance: rc.instance, Token: r.Token, Slot: r.Slot, Trigger: string(trigger), Started: time.Now()}
	if rc.pool != nil {
		bctx, cancel := context.WithTimeout(ctx, recordTimeout)
		defer cancel()
		var slot *time.Time
		if !r.Slot.IsZero() {
			slot = &r.Slot
		}
		a, err := rc.queryRunStart(bctx, r, j.spec.Name, rc.instance, r.Token, slot, rec.Trigger, r.hold.term, r.resource)
		answered := boottime.Now()
		switch {
		case err != nil:
			r.Log.Debug("cannot log the run's start", "err", err)
		case a.id != nil:
			rec.ID = *a.id
			r.recorded = recordedStart{at: *a.started, answered: answered}
		case a.stale:
			return nil, errRunRefused
		case a.paused.by != nil:
			return nil, a.paused.err(ErrPaused)
		default:
			return nil, a.drained.err(ErrDrained)
		}
		r.runID = rec.ID
	}
	j.update(func() { j.last = rec })
	return rec, nil
}

// runStartRow is sqlRunStart's answer: the run's id and recorded start, or
// why it was refused (id nil).
type runStartRow struct {
	id              *int64
	started         *time.Time
	stale           bool
	paused, drained held
}

func (a *runStartRow) scan(row pgx.Row) error {
	return row.Scan(&a.id, &a.started, &a.stale, &a.paused.by, &a.paused.since, &a.paused.why, &a.drained.by, &a.drained.since, &a.drained.why)
}

// held is a pause or a drain as sqlRunStart reads it (by nil: none).
type held struct {
	by, why *string
	since   *time.Time
}

func (h held) err(kind error) *HeldError {
	e := &HeldError{Kind: kind}
	if h.by != nil {
		e.By = *h.by
	}
	if h.since != nil {
		e.Since = *h.since
	}
	if h.why != nil {
		e.Reason = *h.why
	}
	return e
}

// The statements of the scheduler's own records. Those of terms and runs
// call the functions of migration 0016, which apply the fence's rule to
// them: nothing begins once a newer term of its job is recorded or a newer
// token has written to its resource, a successor closes what its
// predecessor left open, and the functions of one job take turns.
const (
	// sqlTermStart records a term ($1 job, $2 token, $3 instance, $4 lease)
	// unless a newer one of the job is recorded, and closes the older terms
	// left open (their instance recorded no end: it died, froze or was cut
	// off; its own record of a hand-over, if it comes, replaces this one)
	// and their open runs. It returns the newer token (0: recorded), and how
	// many terms and runs it closed.
	sqlTermStart = `SELECT newer, closed_terms, cut_runs FROM snip_jobs_term_start($1, $2, $3, $4)`

	// sqlTermEnd records why the term ($1 job, $2 token) ended ($3), by its
	// own instance ($5). A hand-over ($4: the instance resigned while the
	// term held) is the most exact account and replaces what another
	// recorded first; a late notice (expired, key-lost: the instance was
	// paused or cut off) only fills what nobody recorded. ended_at is the
	// earliest known end; noticed_at when the instance itself knew.
	sqlTermEnd = `UPDATE job_terms SET
	reason = CASE WHEN ended_at IS NULL OR $4 THEN $3 ELSE reason END,
	ended_by = CASE WHEN ended_at IS NULL OR $4 THEN $5 ELSE ended_by END,
	ended_at = least(ended_at, now()),
	noticed_at = now()
WHERE job = $1 AND token = $2`

	// sqlRunStart records a run ($1 job, $2 instance, $3 token, $4 slot, $5
	// trigger; $6 a term's run, $7 its resource) unless its token is stale or
	// an operator holds it back as it starts (its job paused, or a
	// singleton's run on a drained instance: the controls' feed may learn of
	// it a moment later, the run's record never does). It returns the run's
	// id (NULL: refused), whether it is stale, and the pause or drain.
	sqlRunStart = `SELECT id, started_at, stale, paused_by, paused_at, paused_why, drained_by, drained_at, drained_why
FROM snip_jobs_run_start($1, $2, $3, $4, $5, $6, $7)`

	// sqlRunEnd records how a run ($1) ended ($2 result, $3 error) at $4,
	// when it returned on the database's clock (see runFinish). A term's run
	// ($7; job $5, token $6) that a newer term had begun before it returned
	// is recorded cut off, never ok. The earliest end recorded stands.
	sqlRunEnd = `SELECT snip_jobs_run_end($1, $2, $3, $4, $5, $6, $7)`

	// sqlRunProcess records the process a run ($1) started ($2).
	sqlRunProcess = `UPDATE job_runs SET pid = $2 WHERE id = $1`

	// sqlReclaimed names the terms of a reclaimed lease ($1).
	sqlReclaimed = `SELECT terms, runs FROM snip_jobs_reclaimed($1)`

	sqlRejection = `INSERT INTO fence_rejections (resource, token, current, instance) VALUES ($1, $2, $3, $4)`
)

// WarmRecords prepares on conn the statements the scheduler writes its
// records with, under their own text as name, so that pgx uses them without a
// parse. Make it the AfterConnect hook of the Records pool (Config.Records):
// a record written on a fresh connection then costs one round trip, not the
// parse of a cold backend, which took 20–90 ms under load in the
// fault-injection runs (a successor's first record, before its job starts). A
// statement that cannot be prepared (its table not migrated yet) is parsed
// when first used instead: WarmRecords never fails a connection. It also
// calls the functions a term's first records run (warmFunctions).
func WarmRecords(ctx context.Context, conn *pgx.Conn) error {
	for _, sql := range []string{sqlTermStart, sqlTermEnd, sqlRunStart, sqlRunEnd, sqlRejection} {
		if _, err := conn.Prepare(ctx, sql, sql); err != nil && ctx.Err() != nil {
			break
		}
	}
	warmFunctions(ctx, conn)
	return nil
}

// warmFunctions calls the functions of a term's start and its run's once on
// conn, in a transaction rolled back, so that PostgreSQL compiles them (once
// per session) now rather than in a term's first records: that took 4–9 ms
// more than a warm one's (BENCHMARKS.md). The term it starts is newer than
// the run it starts, which is refused: no row, no run id taken.
func warmFunctions(ctx context.Context, conn *pgx.Conn) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	b := &pgx.Batch{}
	b.Queue(sqlTermStart, "", int64(2), "", "")
	b.Queue(sqlRunStart, "", "", int64(1), nil, string(TriggerSchedule), true, "")
	_ = tx.SendBatch(ctx, b).Close()
}

// recordTimeout bounds each write to job_runs.
const recordTimeout = 5 * time.Second

// runFinish logs the end of a run: at once in memory (status), and in
// job_runs in the background, so that the run's caller — and the end of a term
// waiting for its job — never waits on that write (over a slow database link
// it could take longer than the job's grace). The record says when the run
// returned, not when the write arrived (see sqlRunEnd). Scheduler.Run waits
// for these writes before it returns.
func (rc *recorder) runFinish(j *job, r *Run, rec *status.RunRecord, result string, runErr error) {
	done := *rec
	done.Finished, done.Result = time.Now(), result
	if runErr != nil {
		done.Error = runErr.Error()
	}
	j.update(func() { j.last = &done })
	if rc.pool == nil || rec.ID == 0 {
		return
	}
	var msg *string
	if runErr != nil {
		msg = &done.Error
	}
	j.recording.Add(1)
	returned := r.recorded.returned()
	rc.writes.Go(func() {
		defer j.recording.Done()
		if err := rc.runEnd(rec.ID, result, msg, returned, j.spec.Name, r.Token, r.hold.term); err != nil {
			j.log.Debug("cannot log the run's end", "run", rec.ID, "err", err)
		}
	})
}

// runProcess records the process a run started: in memory (status), and in
// job_runs (bounded by a second: it is for people).
func (rc *recorder) runProcess(ctx context.Context, j *job, r *Run, pid int) {
	j.update(func() {
		if j.last != nil && j.last.ID == r.runID && j.last.Finished.IsZero() {
			last := *j.last
			last.PID = pid
			j.last = &last
		}
	})
	if rc.pool == nil || r.runID == 0 {
		return
	}
	bctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := rc.pool.Exec(bctx, sqlRunProcess, r.runID, pid); err != nil {
		r.Log.Debug("cannot record the run's process", "pid", pid, "err", err)
	}
}

// recordedStart is a run's start as job_runs recorded it: at, on the
// database's clock, and when its answer arrived here (boottime).
type recordedStart struct {
	at       time.Time
	answered time.Duration
}

// returned is the instant the run returns (now), on the database's clock,
// no later than the truth: the recorded start (which was before the answer
// arrived) plus the time since the answer, suspended time included. The
// database's clock is never compared with this host's.
func (s recordedStart) returned() time.Time { return s.at.Add(boottime.Since(s.answered)) }

// runEnd writes the end of run id in job_runs: result and msg, as of
// returned (recordedStart.returned).
func (rc *recorder) runEnd(id int64, result string, msg *string, returned time.Time, job string, token int64, term bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), recordTimeout)
	defer cancel()
	_, err := rc.pool.Exec(ctx, sqlRunEnd, id, result, msg, returned, job, token, term)
	return err
}

// flushBound bounds how long a hand-over waits for its job's run records: a
// round trip on a healthy database, a fraction of a failover on a sick one
// (the record still lands later, and says the run returned in its term).
const flushBound = 250 * time.Millisecond

// flush waits, at most flushBound, until the ends of j's runs are written:
// a term handed over records its runs' ends before its successor can begin,
// so that none is taken for a run its successor cut off.
func (rc *recorder) flush(j *job) {
	done := make(chan struct{})
	go func() { j.recording.Wait(); close(done) }()
	t := time.NewTimer(flushBound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		j.log.Warn("the ends of its runs are not recorded yet; handing over without waiting longer", "waited", flushBound)
	}
}

// errTermSuperseded is why a term ends whose start could not be recorded
// because a newer term of its job was: it ended while this process did not
// look (a pause, a cut-off link), and must not run its job.
var errTermSuperseded = errors.New("a newer term of the job is recorded")

// termStart records the start of t's term, and closes the terms (and their
// runs) that older ones left open. It returns errTermSuperseded when a newer
// term is recorded. Best-effort otherwise, like bookkeep.
func (rc *recorder) termStart(ctx context.Context, t *tenure) error {
	if rc.pool == nil {
		return nil
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	var newer, terms, runs int64
	err := rc.pool.QueryRow(bctx, sqlTermStart, t.j.spec.Name, t.term.Token(), rc.instance, t.term.Lease()).Scan(&newer, &terms, &runs)
	return rc.termStarted(t, err, newer, terms, runs)
}

// termStarted reads sqlTermStart's answer.
func (rc *recorder) termStarted(t *tenure, err error, newer, terms, runs int64) error {
	switch {
	case err != nil:
		rc.log.Debug("bookkeeping write failed", "err", err)
	case newer > 0:
		return fmt.Errorf("%w (token %d)", errTermSuperseded, newer)
	case terms > 0 || runs > 0:
		t.log.Info("closed what the previous term left open: its instance recorded no end", "terms", terms, "runs", runs)
	}
	return nil
}

// termEnd records why t's term ended, by this instance.
func (rc *recorder) termEnd(ctx context.Context, t *tenure, cause error) {
	label := endLabel(cause, t.term)
	rc.bookkeep(ctx, sqlTermEnd, t.j.spec.Name, t.term.Token(), label, slices.Contains(status.HandOverReasons, label), rc.instance)
}

// RecordReclaimed records, after a death reclaim (leadership.Reclaim), that
// the terms on lease ended because their process died: their reason becomes
// reclaimed, whoever closed them first (the successor that took the job
// over knows less), and runs left open are closed cut off. It returns how
// many terms it named. For `snip-jobs reclaim` and the test bench's
// supervisors; pool is the schema owner's or the runtime role's.
func RecordReclaimed(ctx context.Context, pool *pgxpool.Pool, lease string) (terms int64, err error) {
	var runs int64
	if err := pool.QueryRow(ctx, sqlReclaimed, lease).Scan(&terms, &runs); err != nil {
		return 0, fmt.Errorf("record the reclaimed terms of lease %s: %w", lease, err)
	}
	return terms, nil
}
