package scheduler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// termRecord is a term's start record (job_terms), kept off the path from
// the win to the job's first run: that run writes it in the same round trip
// and transaction as its own record (one commit), so a program starts one
// round trip sooner. When no run claims it within termRecordWait (a cron job
// waiting for its slot), or the term ends first, the lifecycle writes it
// alone. A run of the term waits for it, so that no run is recorded before
// its term. Best-effort, as every record of the scheduler's: a write that
// fails is not tried again.
type termRecord struct {
	t       *tenure
	claimed atomic.Bool
	done    chan struct{} // closed once the claimer's write returned
}

// termRecordWait is how long a term's record waits for its first run.
const termRecordWait = 50 * time.Millisecond

func newTermRecord(t *tenure) *termRecord { return &termRecord{t: t, done: make(chan struct{})} }

// claim makes the caller the writer of the record.
func (tr *termRecord) claim() bool { return tr.claimed.CompareAndSwap(false, true) }

func (tr *termRecord) settle() { close(tr.done) }

// termStartLater writes t's start record alone unless a run claimed it
// within termRecordWait.
func (rc *recorder) termStartLater(ctx context.Context, t *tenure) {
	wait := time.NewTimer(termRecordWait)
	defer wait.Stop()
	select {
	case <-wait.C:
	case <-t.ctx.Done():
	case <-t.rec.done:
		return
	}
	rc.claimAlone(ctx, t)
}

// ensureTermStart writes t's start record at its end if nobody has begun to
// (the term ended before its first run and its record's wait), and waits
// for a write in flight. A write that failed is not tried again: job_terms
// dates a term by its record's commit, and a start recorded at the term's
// end would misdate it (a quorum check of the fault harness caught one).
func (rc *recorder) ensureTermStart(ctx context.Context, t *tenure) {
	if !rc.claimAlone(ctx, t) {
		<-t.rec.done
	}
}

// claimAlone writes t's start record in a statement of its own, if nobody
// has claimed it; false if somebody had.
func (rc *recorder) claimAlone(ctx context.Context, t *tenure) bool {
	if !t.rec.claim() {
		return false
	}
	endSuperseded(t, rc.termStart(ctx, t))
	t.rec.settle()
	return true
}

// endSuperseded ends t when its start's record found a newer term recorded.
func endSuperseded(t *tenure, superseded error) {
	if superseded != nil {
		t.log.Warn("term over before it began: its start cannot be recorded", "err", superseded)
		t.stop(superseded)
	}
}

// queryRunStart records the run's start, preceded in one batch (one round
// trip, one implicit transaction) by its term's when the run claims that
// (startWithTerm).
func (rc *recorder) queryRunStart(ctx context.Context, r *Run, args ...any) (runStartRow, error) {
	var a runStartRow
	switch tr := r.hold.rec; {
	case tr == nil:
	case tr.claim():
		return rc.startWithTerm(ctx, tr, r, args)
	default:
		select { // no run recorded before its term
		case <-tr.done:
		case <-ctx.Done():
		}
	}
	return a, a.scan(rc.pool.QueryRow(ctx, sqlRunStart, args...))
}

// startWithTerm sends tr's record and the run's in one batch. The batch goes
// on when ctx (the run's) ends on its way — the term ended, or shutdown came
// right after the win — since nothing writes the term's record later; the
// run stops waiting for it then (its term's end must not wait on a record),
// and a run the batch still recorded is recorded cancelled.
func (rc *recorder) startWithTerm(ctx context.Context, tr *termRecord, r *Run, args []any) (runStartRow, error) {
	type answer struct {
		a   runStartRow
		err error
	}
	res := make(chan answer, 1)
	var mu sync.Mutex
	gone := false
	rc.writes.Go(func() {
		a, err := rc.batchStart(context.WithoutCancel(ctx), tr, args)
		mu.Lock()
		abandoned := gone
		if !gone {
			res <- answer{a, err}
		}
		mu.Unlock()
		if abandoned && err == nil && a.id != nil {
			msg := "its term ended before its start was recorded"
			if err := rc.runEnd(*a.id, "cancelled", &msg, *a.started, r.Job, r.Token, r.hold.term); err != nil {
				r.Log.Debug("cannot log the run's end", "run", *a.id, "err", err)
			}
		}
	})
	select {
	case got := <-res:
		return got.a, got.err
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case got := <-res: // it came as ctx ended
		return got.a, got.err
	default:
		gone = true
		return runStartRow{}, context.Cause(ctx)
	}
}

// batchStart writes tr's record and the run's in one batch.
func (rc *recorder) batchStart(ctx context.Context, tr *termRecord, args []any) (runStartRow, error) {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	t := tr.t
	b := &pgx.Batch{}
	b.Queue(sqlTermStart, t.j.spec.Name, t.term.Token(), rc.instance, t.term.Lease())
	b.Queue(sqlRunStart, args...)
	br := rc.pool.SendBatch(ctx, b)
	defer br.Close()
	var newer, terms, runs int64
	err := br.QueryRow().Scan(&newer, &terms, &runs)
	endSuperseded(t, rc.termStarted(t, err, newer, terms, runs))
	tr.settle()
	var a runStartRow
	return a, a.scan(br.QueryRow())
}
