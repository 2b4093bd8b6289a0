package aggregator

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/scheduler"
)

const (
	// pruneBoundSQL returns the txid below which events may be deleted: every
	// one of them is processed (below prev's xmin), and, with a retention,
	// was processed at least that long ago (below the horizon recorded then).
	// NULL: nothing may be deleted yet.
	pruneBoundSQL = `SELECT CASE WHEN $1::bigint = 0 THEN xmin ELSE
	-- least() would skip a NULL: no horizon that old means nothing to prune
	CASE WHEN old > xmin THEN xmin ELSE old END END::text
FROM (SELECT pg_snapshot_xmin(prev) AS xmin, (SELECT max(horizon) FROM click_aggregator_horizons
	WHERE recorded_at <= now() - $1::bigint * interval '1 microsecond') AS old
	FROM click_aggregator_state FOR UPDATE) s`

	// pruneSQL deletes up to $2 events below the bound, found through the
	// primary key and deleted by their row address.
	pruneSQL = `WITH d AS (
	DELETE FROM click_events WHERE ctid = ANY (ARRAY(SELECT ctid FROM click_events WHERE txid < $1::xid8 LIMIT $2))
	RETURNING 1
) SELECT count(*) FROM d`

	prunedSQL = `UPDATE click_aggregator_state SET unpruned = greatest(unpruned - $1, 0)`

	// forgetHorizonsSQL keeps only the horizons retention may still need.
	forgetHorizonsSQL = `DELETE FROM click_aggregator_horizons WHERE recorded_at < (
	SELECT max(recorded_at) FROM click_aggregator_horizons WHERE recorded_at <= now() - $1::bigint * interval '1 microsecond')`
)

// pendingSQL decides, reading only, what has work: a batch, to fold, when a
// window is in progress, when a transaction finished since prev has events
// (the newest event's txid at or above prev's xmax, or an event of one of
// prev's in-progress transactions), or when the current snapshot is not
// later than prev (a position from another cluster: the batch refuses it and
// records that); a batch, to advance, when a new position would free the
// oldest event for pruning (it is not below prev's xmin, which a transaction
// open elsewhere in the cluster held back, but is below the current one's);
// a prune, when the oldest event lies below its bound (pruneBoundSQL;
// $1 is the retention in microseconds); with a retention, the record of the
// horizon, when no record a minute old or newer covers prev's xmin (an idle
// job records it once, then writes nothing).
//
// It runs every interval on a table that holds the whole retention, so it
// reads only the ends of the primary key: the newest and the oldest txid
// (max and min; NULL for an empty table), and, per in-progress transaction,
// the least txid from it on. The planner always takes the index for such an
// aggregate, which cannot stop early; for an EXISTS it may not: it took
// `txid >= x` for a third of the table and read all of it (0.6 s for 2 M
// events) to find nothing. $2: a prune has just deleted a full chunk, so more
// is prunable; the oldest event, found only past the index entries of every
// event deleted since the last VACUUM, is not read. It is read once (oldest,
// a CTE computed when first used) for both answers that need it.
const pendingSQL = `WITH oldest AS MATERIALIZED (SELECT min(txid) AS m FROM click_events)
SELECT
	s.target IS NOT NULL
	OR pg_snapshot_xmax(pg_current_snapshot()) < pg_snapshot_xmax(s.prev)
	OR coalesce((SELECT max(txid) FROM click_events) >= pg_snapshot_xmax(s.prev), false)
	OR EXISTS (SELECT FROM pg_snapshot_xip(s.prev) x WHERE (SELECT min(e.txid) FROM click_events e WHERE e.txid >= x) = x),
	NOT $2::bool AND s.unpruned > 0 AND coalesce((SELECT m >= pg_snapshot_xmin(s.prev) AND m < pg_snapshot_xmin(pg_current_snapshot())
		FROM oldest), false),
	s.unpruned > 0 AND ($2::bool OR coalesce((SELECT m FROM oldest) < (
		SELECT CASE WHEN $1::bigint = 0 THEN x WHEN old > x THEN x ELSE old END
		FROM (SELECT pg_snapshot_xmin(s.prev) AS x, (SELECT max(horizon) FROM click_aggregator_horizons
			WHERE recorded_at <= now() - $1::bigint * interval '1 microsecond') AS old) b), false)),
	$1::bigint > 0 AND NOT EXISTS (SELECT FROM click_aggregator_horizons
		WHERE recorded_at > now() - interval '1 minute' OR horizon >= pg_snapshot_xmin(s.prev))
FROM click_aggregator_state s`

// work is what pending found to do. fold and advance each call for a batch.
type work struct{ fold, advance, prune, horizon bool }

// pending reads what has work (pruning: see pendingSQL). Without a pool (a job built for a test of its
// options) everything is assumed to.
func (j *job) pending(ctx context.Context, pruning bool) (work, error) {
	if j.pool == nil {
		return work{fold: true}, nil
	}
	var w work
	if err := j.pool.QueryRow(ctx, pendingSQL, j.opts.Retention.Microseconds(), pruning).Scan(&w.fold, &w.advance, &w.prune, &w.horizon); err != nil {
		return work{}, fmt.Errorf("look for work: %w", err)
	}
	return w, nil
}

// recordHorizonSQL is horizonSQL for a job that has caught up: prev's xmin.
const recordHorizonSQL = `INSERT INTO click_aggregator_horizons (recorded_at, horizon)
SELECT now(), pg_snapshot_xmin(prev) FROM click_aggregator_state
WHERE NOT EXISTS (SELECT FROM click_aggregator_horizons WHERE recorded_at > now() - interval '1 minute')`

// recordHorizon records the horizon in its own fenced transaction.
func (j *job) recordHorizon(ctx context.Context, run *scheduler.Run) error {
	return run.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, recordHorizonSQL); err != nil {
			return fmt.Errorf("record horizon: %w", err)
		}
		return nil
	})
}

// pruneChunk is how many events one prune deletes at most: about 50 ms of
// work, the delay a prune can add to a batch waiting behind it.
const pruneChunk = 50_000

// prune deletes up to pruneChunk processed events whose retention has
// passed, in tx (fenced by the caller), and returns how many it deleted.
func (j *job) prune(ctx context.Context, tx pgx.Tx) (int64, error) {
	retention := j.opts.Retention.Microseconds()
	var bound *string
	if err := tx.QueryRow(ctx, pruneBoundSQL, retention).Scan(&bound); err != nil {
		return 0, fmt.Errorf("prune: read bound: %w", err)
	}
	if bound == nil {
		return 0, nil
	}
	var n int64
	if err := tx.QueryRow(ctx, pruneSQL, *bound, pruneChunk).Scan(&n); err != nil {
		return 0, fmt.Errorf("prune below %s: %w", *bound, err)
	}
	if n > 0 {
		if _, err := tx.Exec(ctx, prunedSQL, n); err != nil {
			return 0, fmt.Errorf("prune: save: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, forgetHorizonsSQL, retention); err != nil {
		return 0, fmt.Errorf("prune: forget old horizons: %w", err)
	}
	return n, nil
}
