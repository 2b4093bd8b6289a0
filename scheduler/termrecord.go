package scheduler

import (
	"context"
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

// queryRunStart sends the run's record, preceded in one batch (one round
// trip, one implicit transaction) by its term's when the run claims that.
// The caller scans the returned row, then calls the returned close.
func (rc *recorder) queryRunStart(ctx context.Context, r *Run, args ...any) (pgx.Row, func()) {
	tr := r.hold.rec
	if tr == nil {
		return rc.pool.QueryRow(ctx, sqlRunStart, args...), func() {}
	}
	if !tr.claim() {
		select { // no run recorded before its term
		case <-tr.done:
		case <-ctx.Done():
		}
		return rc.pool.QueryRow(ctx, sqlRunStart, args...), func() {}
	}
	t := tr.t
	b := &pgx.Batch{}
	b.Queue(sqlTermStart, t.j.spec.Name, t.term.Token(), rc.instance, t.term.Lease())
	b.Queue(sqlRunStart, args...)
	// The term's record is not given up when the run's context ends (the term
	// ended, or shutdown, while the batch was on its way): it is never
	// written later, so the term would stay unrecorded.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	br := rc.pool.SendBatch(bctx, b)
	var newer, terms, runs int64
	err := br.QueryRow().Scan(&newer, &terms, &runs)
	endSuperseded(t, rc.termStarted(t, err, newer, terms, runs))
	tr.settle()
	return br.QueryRow(), func() { _ = br.Close(); cancel() }
}
