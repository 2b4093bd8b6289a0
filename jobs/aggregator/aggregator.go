package aggregator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/scheduler"
)

// Type is the aggregator job type, for the scheduler's registry.
func Type() scheduler.Type {
	return scheduler.Type{
		Name:    "aggregator",
		Doc:     "folds click_events into link_counts and link_hourly_counts, each event exactly once",
		Options: configs.OptionsOf(DefaultOptions),
		New:     newJob,
		Modes:   []configs.Mode{configs.ModeLeader},
		ModeWhy: "its writes are fenced by the term's token",
	}
}

// Back-off after a failed batch: doubled from minBackoff up to maxBackoff,
// reset by the next success.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Bounds of the range of transaction ids one batch reads (see firstSpan and
// nextSpan).
const (
	initialSpan = 1024
	maxSpan     = 1 << 40
)

// localSettingsSQL applies to the batch's transaction only. Custom plans: the
// right plan for a range of transaction ids depends on how wide it is (a
// backlog's whole table or a few pages). work_mem: the bitmap of a wide range
// stays exact.
const localSettingsSQL = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true), set_config('work_mem', '64MB', true)`

// job is one configured aggregator.
type job struct {
	opts Options
	m    *metrics
	pool *pgxpool.Pool // for the read that finds work (pending); nil: always look
	// clusterProbe: whether the database lets batches read its cluster's
	// identifier (clusterID); probeUnknown until the first batch asks.
	clusterProbe atomic.Int32
}

func newJob(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
	if spec.Schedule.Kind != configs.Continuous {
		return nil, fmt.Errorf("aggregator %q: needs continuous: true: it runs until its term ends, not %s", spec.Name, spec.Schedule.Kind)
	}
	opts, err := configs.DecodeOptions(spec, DefaultOptions)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(env.Metrics, spec.Name)
	if err != nil {
		return nil, fmt.Errorf("aggregator %q: %w", spec.Name, err)
	}
	return &job{opts: opts, m: m, pool: env.Pool}, nil
}

// Run folds batches until ctx ends or the term does; it returns nil then. A
// failed batch (the database restarting, a broken connection, a statement
// error) is logged and retried after a back-off: nothing it did was kept. It
// returns an error only when a newer term has written (the fence refused this
// one): this term can never write again.
func (j *job) Run(ctx context.Context, run *scheduler.Run) error {
	var lp loop
	for {
		if ctx.Err() != nil || !run.Valid() {
			return nil
		}
		started := time.Now()
		next, err := stepFold, error(nil)
		if !lp.more {
			next, err = j.lookStep(ctx, run, &lp)
		}
		if next == stepFold {
			next, err = j.foldStep(ctx, run, &lp)
		}
		switch next {
		case stepStop:
			return err
		case stepPace:
			// Batches start at most every Interval: a batch that took longer
			// has let events pile up, and the next one starts at once.
			if !sleep.For(ctx, j.opts.Interval-time.Since(started)) {
				return nil
			}
		}
	}
}

// loop is what Run carries from one step to the next.
type loop struct {
	span    uint64 // the next batch's span; 0: the first batch guesses
	backoff time.Duration
	refused refusal
	more    bool // the last batch left events waiting: no need to ask
	pruning bool // the last prune deleted a full chunk: more is prunable
}

// step says what Run does after a step.
type step int

const (
	stepAgain step = iota // the next step, at once
	stepPace              // the next step once Interval has passed since this one started
	stepFold              // a batch, now
	stepStop              // return the step's error
)

// lookStep decides, by a read, whether there is anything to fold before a
// fenced transaction, which writes, is opened (idle means idle), and does an
// idle job's work when there is not.
func (j *job) lookStep(ctx context.Context, run *scheduler.Run, lp *loop) (step, error) {
	w, err := j.pending(ctx, lp.pruning)
	if err != nil {
		return failedStep(j.failed(ctx, run, "look for work", err, &lp.backoff, nil))
	}
	if w.fold || w.advance {
		return stepFold, nil
	}
	lp.backoff = 0
	j.m.backlog.Set(0)
	j.m.idle.Inc()
	run.Progress()
	again, stop, err := j.idleWork(ctx, run, w, &lp.backoff)
	switch {
	case stop:
		return stepStop, err
	case again:
		lp.pruning = w.prune
		return stepAgain, nil
	}
	lp.pruning = false
	return stepPace, nil
}

// foldStep folds one batch; caught up, it prunes processed events.
func (j *job) foldStep(ctx context.Context, run *scheduler.Run, lp *loop) (step, error) {
	res, err := j.batch(ctx, run, lp.span)
	if err != nil {
		return failedStep(j.failed(ctx, run, "batch", err, &lp.backoff, &lp.refused))
	}
	lp.backoff = 0
	if lp.refused.batches > 0 {
		run.Log.Info("aggregator: batches run again: the refused position in click_aggregator_state was reset",
			"refused_batches", lp.refused.batches)
		lp.refused = refusal{}
	}
	run.Progress()
	lp.span = nextSpan(res.span, res, j.opts.BatchSize)
	if lp.more = !res.windowDone || res.seen >= int64(j.opts.BatchSize); lp.more {
		return stepAgain, nil
	}
	// Caught up: delete processed events while there is time. Every time,
	// rather than in big chunks now and then: a chunk delays the next batch,
	// and small ones spread that delay evenly.
	if res.unpruned > 0 {
		n, err := j.pruneOnce(ctx, run)
		if err != nil {
			return failedStep(j.failed(ctx, run, "prune", err, &lp.backoff, nil))
		}
		if lp.pruning = n >= pruneChunk; lp.pruning {
			return stepAgain, nil // more to prune, after looking for new events
		}
	}
	return stepPace, nil
}

// failedStep is the step after a failure failed handled.
func failedStep(stop bool, err error) (step, error) {
	if stop {
		return stepStop, err
	}
	return stepAgain, nil
}

// idleWork does what an idle job may have to: prune events whose retention
// has passed, record the horizon once. again: look again at once (a full
// prune chunk, or a failure handled); stop: Run returns err.
func (j *job) idleWork(ctx context.Context, run *scheduler.Run, w work, backoff *time.Duration) (again, stop bool, err error) {
	if w.horizon {
		if err := j.recordHorizon(ctx, run); err != nil {
			stop, err := j.failed(ctx, run, "record horizon", err, backoff, nil)
			return true, stop, err
		}
	}
	if w.prune {
		n, err := j.pruneOnce(ctx, run)
		if err != nil {
			stop, err := j.failed(ctx, run, "prune", err, backoff, nil)
			return true, stop, err
		}
		return n >= pruneChunk, false, nil
	}
	return false, false, nil
}

// refusal is a streak of batches refused because the stored position is not
// earlier than the database's snapshot (refusedError): the position, and how
// many batches were refused.
type refusal struct {
	prev    string
	batches int
}

// What the operator reads, once per refusal streak.
const (
	refusedMsg = "aggregator: every batch is refused: the position stored in click_aggregator_state is not earlier than " +
		"this database's current snapshot, so it comes from another cluster's transaction ids " +
		"(a pg_dump restore into a new cluster, or the row copied from another database). " +
		"Nothing is counted until the position is reset; click events are kept meanwhile"
	refusedRecover = "reset click_aggregator_state as docs/aggregator.md says under \"After a pg_dump restore\": " +
		"insert again the restored events it had not processed, delete the restored events, set prev to '1:1:'. " +
		"Do not wait for the error to go away: once this cluster's transaction ids pass the stored ones, " +
		"a new leader would resume from that position and never count the events inserted meanwhile"
)

// failed handles a failed batch or prune. stop says Run must return err: the
// context or term ended (err nil), or the fence refused this term. Otherwise
// it logs, backs off and lets the loop go on. A batch refused for its stored
// position (refusedError) is logged at ERROR once per streak, recorded in
// refused, and retried like any failure: the operator's reset ends it.
func (j *job) failed(ctx context.Context, run *scheduler.Run, what string, err error, backoff *time.Duration, refused *refusal) (stop bool, _ error) {
	switch {
	case ctx.Err() != nil, errors.Is(err, scheduler.ErrTermEnded):
		return true, nil
	case errors.Is(err, fencing.ErrStaleToken):
		run.Log.Warn("aggregator: a newer term has written; stopping", "err", err)
		return true, fmt.Errorf("aggregator: %s: %w", what, err)
	}
	j.m.errors.Inc()
	*backoff = min(max(2**backoff, minBackoff), maxBackoff)
	var r *refusedError
	switch {
	case refused == nil || !errors.As(err, &r):
		run.Log.Warn("aggregator: "+what+" failed; retrying", "err", err, "backoff", *backoff)
	case r.prev != refused.prev:
		*refused = refusal{prev: r.prev, batches: 1}
		run.Log.Error(refusedMsg, "recover", refusedRecover, "stored_prev", r.prev, "err", err)
	default:
		refused.batches++
		run.Log.Debug("aggregator: batch refused again; the stored position has not been reset",
			"stored_prev", r.prev, "refused_batches", refused.batches, "backoff", *backoff)
	}
	if !sleep.For(ctx, *backoff) {
		return true, nil
	}
	return false, nil
}

// batch runs one fold in its own fenced transaction and records its metrics.
// A batch that refused the stored position (fold) returns its
// *refusedError once its transaction, which records the refusal, committed.
func (j *job) batch(ctx context.Context, run *scheduler.Run, span uint64) (batchResult, error) {
	start := time.Now()
	var res batchResult
	err := run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, localSettingsSQL); err != nil {
			return fmt.Errorf("settings: %w", err)
		}
		var err error
		res, err = j.fold(ctx, tx, run.Token, span)
		return err
	})
	if err != nil {
		return batchResult{}, err
	}
	if res.refused != nil {
		return batchResult{}, res.refused
	}
	if res.clusterDenied != nil {
		run.Log.Warn("aggregator: the database does not let this role read pg_control_system(): "+
			"the guard against a position restored from another cluster that no batch looked at is off "+
			"(the other guards stay; reset the position right after any pg_dump restore)", "err", res.clusterDenied)
	}
	if res.movedFrom != 0 {
		run.Log.Info("aggregator: the database is on another PostgreSQL cluster than the last batch (a pg_upgrade, a physical copy "+
			"or a promoted standby) with no sign of another numbering of transactions: carrying on from the stored position",
			"from_system_identifier", res.movedFrom, "system_identifier", res.cluster)
	}
	took := time.Since(start)
	run.Log.Debug("aggregator: batch", "seen", res.seen, "folded", res.folded, "txid_from", res.lo, "txid_to", res.hi,
		"window_done", res.windowDone, "took", took)
	j.m.latency.Observe(took.Seconds())
	j.m.batches.Inc()
	j.m.folded.Add(float64(res.folded))
	for reason, n := range res.rejected {
		j.m.rejected.WithLabelValues(reason).Add(float64(n))
	}
	j.m.backlog.Set(float64(res.backlog))
	if len(res.rejected) > 0 {
		run.Log.Info("aggregator: rejected events", "reasons", res.rejected, "txid_from", res.lo, "txid_to", res.hi)
	}
	return res, nil
}

// pruneOnce deletes one chunk of processed events in its own fenced
// transaction.
func (j *job) pruneOnce(ctx context.Context, run *scheduler.Run) (int64, error) {
	var n int64
	err := run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		n, err = j.prune(ctx, tx)
		return err
	})
	if err != nil {
		return 0, err
	}
	j.m.pruned.Add(float64(n))
	return n, nil
}

// nextSpan sizes the next batch's range of transaction ids so that it holds
// about want events, from the density the last batch saw: at most 64 times
// wider or 16 times narrower at a time, so that one odd range does not swing
// it far. A range cut short by the end of its window says nothing about
// density unless it held too many events.
func nextSpan(span uint64, res batchResult, want int) uint64 {
	width := res.hi - res.lo
	switch {
	case res.seen == 0 && !res.clipped:
		span *= 64
	case res.seen == 0, res.clipped && res.seen <= int64(want), width == 0:
		// nothing learnt
	default:
		f := min(max(float64(want)/float64(res.seen), 1.0/16), 64)
		span = uint64(float64(width) * f)
	}
	return min(max(span, 1), maxSpan)
}
