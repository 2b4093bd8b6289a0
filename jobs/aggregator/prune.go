package aggregator

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
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
