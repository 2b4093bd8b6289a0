package aggregator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// stateSQL locks the aggregator's one state row (writers of it queue, so
	// even two batches that were not fenced would run one after the other)
	// and reads it. Without a target, this statement's own snapshot becomes
	// the target: every transaction that finished before it is in it.
	stateSQL = `SELECT prev::text, coalesce(target, pg_current_snapshot())::text, cursor_txid::text,
	now() + $1::bigint * interval '1 microsecond', now() - $2::bigint * interval '1 microsecond',
	greatest(pg_stat_get_live_tuples('click_events'::regclass) - unpruned, 0),
	coalesce(refused_prev = prev::text, false),
	cluster_id, prev_max_id,
	CASE WHEN target IS NOT NULL THEN target_max_id
	     ELSE (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM click_events_id_seq) END
FROM click_aggregator_state FOR UPDATE`

	// numberedAfterSQL looks for evidence that prev ($2) is another
	// cluster's numbering: an event given an id after prev was taken
	// (above $1, prev_max_id) whose transaction looks finished in prev.
	numberedAfterSQL = `SELECT count(*) FROM (SELECT FROM click_events
	WHERE id > $1 AND pg_visible_in_snapshot(txid, $2::text::pg_snapshot) LIMIT 1000) e`

	// refuseSQL records that the stored position was refused (see fold).
	refuseSQL = `UPDATE click_aggregator_state SET refused_prev = prev::text WHERE refused_prev IS DISTINCT FROM prev::text`

	// foldSQL folds the events of the transactions that the condition
	// %[1]s selects (built by window). It counts them by (link, hour) in one
	// scan, with the count of those that are valid by themselves: no defect
	// (computed at insert) and clicked_at within [$4, $3]. It adds the valid
	// counts of known links to link_counts and link_hourly_counts and returns
	// how many events it saw, how many it counted, and the distinct link ids
	// it found unknown (NULL: none). Whether a link is known is looked up once
	// per (link, hour) that has valid events, after grouping, not for every
	// row; and it is decided here, in this statement's snapshot: rejectSQL
	// goes by the returned list instead of reading links again (at READ
	// COMMITTED it would see the links as they are at its own start).
	foldSQL = `WITH agg AS MATERIALIZED (
	SELECT link_id, hour, count(*) FILTER (WHERE defect IS NULL AND clicked_at <= $3 AND clicked_at >= $4) AS ok, count(*) AS seen
	FROM click_events
	WHERE %[1]s
	GROUP BY link_id, hour
), checked AS MATERIALIZED (
	SELECT a.link_id, a.hour, a.ok, EXISTS (SELECT FROM links l WHERE l.id = a.link_id) AS known
	FROM agg a WHERE a.ok > 0
), valid AS MATERIALIZED (
	SELECT link_id, hour, ok AS clicks FROM checked WHERE known
), hourly AS (
	INSERT INTO link_hourly_counts AS h (link_id, hour, clicks)
	SELECT link_id, hour, clicks FROM valid ORDER BY link_id, hour
	ON CONFLICT (link_id, hour) DO UPDATE SET clicks = h.clicks + EXCLUDED.clicks
), totals AS (
	INSERT INTO link_counts AS c (link_id, clicks)
	SELECT link_id, sum(clicks) FROM valid GROUP BY link_id ORDER BY link_id
	ON CONFLICT (link_id) DO UPDATE SET clicks = c.clicks + EXCLUDED.clicks, updated_at = now()
)
SELECT (SELECT coalesce(sum(seen), 0) FROM agg)::bigint, (SELECT coalesce(sum(clicks), 0) FROM valid)::bigint,
	(SELECT array_agg(DISTINCT link_id) FROM checked WHERE NOT known)`

	// rejectSQL copies the events of the same transactions that foldSQL did
	// not count into click_rejects, with the reason, and returns how many per
	// reason. It runs only when there are some, and reads only those: %[2]s
	// (built by badRows) selects the events with a defect, those out of
	// [$4, $3], and those of the links foldSQL found unknown. An event whose
	// link_id is NULL always has a defect ('null_link', computed at insert),
	// so it never depends on the list, where NULL would match nothing.
	rejectSQL = `WITH ins AS (
	INSERT INTO click_rejects (event_id, txid, link_id, clicked_at, referrer_host, country, reason, token)
	SELECT id, txid, link_id, clicked_at, referrer_host, country,
		CASE
		WHEN defect IS NOT NULL THEN defect
		WHEN clicked_at > $3 THEN 'future'
		WHEN clicked_at < $4 THEN 'too_old'
		ELSE 'unknown_link' -- only the list's links are left
		END, $5
	FROM click_events
	WHERE (%[1]s) AND (%[2]s)
	RETURNING reason
)
SELECT reason, count(*) FROM ins GROUP BY reason`

	// saveSQL moves the state on and returns the backlog estimate (live rows
	// of click_events, from the statistics, which lag by about a second, less
	// the processed ones still there) and how many processed ones are there.
	saveSQL = `UPDATE click_aggregator_state SET
	prev = coalesce($1::text::pg_snapshot, prev), target = $2::text::pg_snapshot, cursor_txid = $3::xid8,
	folded = folded + $4, rejected = rejected + $5, unpruned = unpruned + $4 + $5,
	token = $6, updated_at = now(), cluster_id = coalesce($7, cluster_id),
	prev_max_id = CASE WHEN $1::text IS NULL THEN prev_max_id ELSE $8 END,
	target_max_id = CASE WHEN $1::text IS NULL THEN $8 END
RETURNING greatest(pg_stat_get_live_tuples('click_events'::regclass) - unpruned, 0), unpruned`

	// horizonSQL records, about once a minute, the horizon below which every
	// event has been processed; retention prunes by it.
	horizonSQL = `INSERT INTO click_aggregator_horizons (recorded_at, horizon)
SELECT now(), $1::xid8
WHERE NOT EXISTS (SELECT FROM click_aggregator_horizons WHERE recorded_at > now() - interval '1 minute')`
)

// batchResult is what one batch did.
type batchResult struct {
	seen     int64            // events of the batch
	folded   int64            // of which valid and counted
	rejected map[string]int64 // of which rejected, by reason
	// windowDone: the batch reached its target snapshot; the next one takes
	// a new snapshot (and finds what committed since).
	windowDone bool
	backlog    int64 // estimate, see saveSQL
	unpruned   int64 // processed events still in click_events
	lo, hi     uint64
	clipped    bool // hi was the target's xmax, not lo + span
	span       uint64
	// refused: the batch refused the stored position and recorded that
	// (its transaction commits only that); Run reports it as the error.
	refused *refusedError
	// movedFrom: the system identifier of the cluster the previous batch
	// ran on, when it was another one (0: the same, or not known).
	movedFrom, cluster int64
	// clusterDenied: this batch found that the database refuses to say
	// which cluster it is (see clusterID).
	clusterDenied error
}

// fold runs one batch in tx, which the caller has fenced: it folds the
// events of the next range of transaction ids between the state's snapshots
// and moves the state past them. span is how many transaction ids the range
// covers at most; 0 lets fold guess (firstSpan). The result says which span
// it used.
//
// A stored position that is not earlier than the target (checkLater) is
// refused: fold records the refusal in the state row (refused_prev) and
// returns it in batchResult.refused, to be committed, so that every later
// batch, of any term, refuses the same position, even once the check would
// pass (see refusedError).
func (j *job) fold(ctx context.Context, tx pgx.Tx, token int64, span uint64) (batchResult, error) {
	st, err := j.readState(ctx, tx)
	if err != nil {
		return batchResult{}, err
	}
	if refused, err := st.refusal(ctx, tx); refused != nil || err != nil {
		return batchResult{refused: refused}, err
	}
	r, err := st.nextRange(span, j.opts.BatchSize)
	if err != nil {
		return batchResult{}, err
	}
	res := batchResult{lo: r.lo, hi: r.hi, clipped: r.clipped, windowDone: r.clipped, span: r.span, movedFrom: st.movedFrom(), clusterDenied: st.denied}
	if st.cluster != nil {
		res.cluster = *st.cluster
	}
	cond, extra := window(4, r.stragglers, r.running)
	args := append([]any{strconv.FormatUint(r.lo, 10), strconv.FormatUint(r.hi, 10), st.futureBound, st.oldBound}, extra...)
	var unknown []int64 // links not in links, as the fold saw them
	if err := tx.QueryRow(ctx, fmt.Sprintf(foldSQL, cond), args...).Scan(&res.seen, &res.folded, &unknown); err != nil {
		return batchResult{}, fmt.Errorf("fold [%d, %d): %w", r.lo, r.hi, err)
	}
	var rejected int64
	if res.seen > res.folded {
		if res.rejected, rejected, err = reject(ctx, tx, r, args[:4], token, unknown); err != nil {
			return batchResult{}, err
		}
	}
	// Every event seen is either counted or rejected, and not both: both
	// statements decide with the same bounds and the same unknown links, on
	// the event's own columns, which never change (click_events refuses
	// UPDATE). What this still catches is the batch's rows themselves
	// changing between the statements: an event deleted by someone else
	// would be neither. Refuse the batch rather than lose it; the next try
	// reads the rows as they are then.
	if res.folded+rejected != res.seen {
		return batchResult{}, fmt.Errorf("batch [%d, %d): %d events seen, %d counted, %d rejected: the batch's events changed between its statements; retrying",
			r.lo, r.hi, res.seen, res.folded, rejected)
	}
	if res.backlog, res.unpruned, err = st.save(ctx, tx, r, res.folded, rejected, token); err != nil {
		return batchResult{}, err
	}
	return res, nil
}

// foldState is the aggregator's state row as a batch reads it, with the
// cluster it runs on.
type foldState struct {
	prevText               string
	prev, target           snapshot
	cursorText             *string
	futureBound, oldBound  time.Time
	backlog                int64
	refusedBefore          bool
	storedCluster          *int64
	prevMaxID, targetMaxID *int64
	cluster                *int64
	denied                 error // the database refuses to say which cluster it is
}

// readState reads and parses the state row and the cluster's identifier.
func (j *job) readState(ctx context.Context, tx pgx.Tx) (*foldState, error) {
	st := &foldState{}
	var targetText string
	err := tx.QueryRow(ctx, stateSQL, j.opts.MaxFutureSkew.Microseconds(), j.opts.MaxAge.Microseconds()).
		Scan(&st.prevText, &targetText, &st.cursorText, &st.futureBound, &st.oldBound, &st.backlog, &st.refusedBefore,
			&st.storedCluster, &st.prevMaxID, &st.targetMaxID)
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	if st.cluster, st.denied, err = j.clusterID(ctx, tx); err != nil {
		return nil, fmt.Errorf("read the cluster's system identifier: %w", err)
	}
	if st.prev, err = parseSnapshot(st.prevText); err != nil {
		return nil, fmt.Errorf("state prev: %w", err)
	}
	if st.target, err = parseSnapshot(targetText); err != nil {
		return nil, fmt.Errorf("state target: %w", err)
	}
	return st, nil
}

// movedFrom is the cluster the previous batch ran on when it was another
// one (0: the same, or not known).
func (st *foldState) movedFrom() int64 {
	if st.storedCluster != nil && st.cluster != nil && *st.storedCluster != *st.cluster {
		return *st.storedCluster
	}
	return 0
}

// refusal refuses a stored position that was refused before, that another
// cluster's numbering wrote, or that is not earlier than the target
// (checkLater); a new refusal is recorded in the state row (refused_prev),
// to be committed.
func (st *foldState) refusal(ctx context.Context, tx pgx.Tx) (*refusedError, error) {
	if st.refusedBefore {
		return &refusedError{prev: st.prevText,
			err: fmt.Errorf("%w: the stored position %s was refused before and has not been reset", errNotLater, st.prevText)}, nil
	}
	refuse := func(err error) (*refusedError, error) {
		if _, err := tx.Exec(ctx, refuseSQL); err != nil {
			return nil, fmt.Errorf("record the refused position: %w", err)
		}
		return &refusedError{prev: st.prevText, err: err}, nil
	}
	if from := st.movedFrom(); from != 0 && st.prevMaxID != nil {
		var n int64
		if err := tx.QueryRow(ctx, numberedAfterSQL, *st.prevMaxID, st.prevText).Scan(&n); err != nil {
			return nil, fmt.Errorf("compare the position with this cluster's events: %w", err)
		}
		if n > 0 {
			return refuse(fmt.Errorf("%w: the position was stored on PostgreSQL cluster %d and this is cluster %d, "+
				"where %d event(s) (or more) inserted after it (id above %d) look processed in it: "+
				"its transaction ids are the other cluster's numbering", errNotLater, from, *st.cluster, n, *st.prevMaxID))
		}
	}
	if err := checkLater(st.prev, st.target); err != nil {
		return refuse(err)
	}
	return nil, nil
}

// foldRange is what one batch reads: transaction ids [lo, hi), the
// stragglers, less target's in-progress ones (running).
type foldRange struct {
	lo, hi              uint64
	clipped             bool // hi was the target's xmax, not lo + span
	span                uint64
	stragglers, running []uint64
}

// nextRange is the batch's range. The events to fold are those of
// transactions visible in target and not in prev: the stragglers (in
// progress in prev, finished in target) and the ids from prev's xmax up to
// target's xmax, less target's in-progress ones. The first batch of a window
// takes the stragglers and the start of the range; later ones continue the
// range from the cursor.
func (st *foldState) nextRange(span uint64, batchSize int) (foldRange, error) {
	r := foldRange{lo: st.prev.xmax}
	if st.cursorText == nil {
		for _, x := range st.prev.xip {
			if st.target.visible(x) {
				r.stragglers = append(r.stragglers, x)
			}
		}
	} else {
		var err error
		if r.lo, err = strconv.ParseUint(*st.cursorText, 10, 64); err != nil {
			return r, fmt.Errorf("state cursor %q: %w", *st.cursorText, err)
		}
	}
	if span == 0 {
		span = firstSpan(r.lo, st.target.xmax, st.backlog, batchSize)
	}
	r.span, r.hi = span, r.lo+span
	if r.hi < r.lo || r.hi >= st.target.xmax { // overflow, or past the window
		r.hi, r.clipped = max(r.lo, st.target.xmax), true
	}
	// Only target's in-progress ids inside what is read need excluding.
	for _, x := range st.target.xip {
		if x >= r.lo && x < r.hi {
			r.running = append(r.running, x)
		}
	}
	return r, nil
}

// reject copies the range's events the fold did not count to click_rejects,
// by reason; bounds are the fold's first four arguments.
func reject(ctx context.Context, tx pgx.Tx, r foldRange, bounds []any, token int64, unknown []int64) (map[string]int64, int64, error) {
	byReason := map[string]int64{}
	var total int64
	rargs := append(append([]any{}, bounds...), token)
	bad := badRows(len(rargs), unknown)
	if len(unknown) > 0 {
		rargs = append(rargs, unknown)
	}
	cond, extra := window(len(rargs), r.stragglers, r.running)
	rargs = append(rargs, extra...)
	rows, err := tx.Query(ctx, fmt.Sprintf(rejectSQL, cond, bad), rargs...)
	if err != nil {
		return nil, 0, fmt.Errorf("reject [%d, %d): %w", r.lo, r.hi, err)
	}
	var reason string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&reason, &n}, func() error {
		byReason[reason] += n
		total += n
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reject [%d, %d): %w", r.lo, r.hi, err)
	}
	return byReason, total, nil
}

// save moves the state past the range (to the target when the range reached
// it, else the cursor to hi) and, at the end of a window, records the
// horizon. It returns the backlog estimate and the unpruned count.
func (st *foldState) save(ctx context.Context, tx pgx.Tx, r foldRange, folded, rejected, token int64) (backlog, unpruned int64, err error) {
	var newPrev, newTargetArg, cursorArg *string
	if r.clipped {
		s := st.target.String()
		newPrev = &s
	} else {
		s, c := st.target.String(), strconv.FormatUint(r.hi, 10)
		newTargetArg, cursorArg = &s, &c
	}
	if err := tx.QueryRow(ctx, saveSQL, newPrev, newTargetArg, cursorArg, folded, rejected, token, st.cluster, st.targetMaxID).
		Scan(&backlog, &unpruned); err != nil {
		return 0, 0, fmt.Errorf("save state: %w", err)
	}
	if r.clipped {
		if _, err := tx.Exec(ctx, horizonSQL, strconv.FormatUint(st.target.xmin, 10)); err != nil {
			return 0, 0, fmt.Errorf("record horizon: %w", err)
		}
	}
	return backlog, unpruned, nil
}

// clusterID reads the system identifier of the database's cluster
// (pg_control_system()), or nil when the database refuses to say: some
// managed services revoke the function. The first time, it asks in a
// savepoint, so that a refusal costs the batch nothing; it then says so once
// (denied, for the caller to log) and the guard that needs it is off for
// the life of the job. It returns an error only for other failures.
func (j *job) clusterID(ctx context.Context, tx pgx.Tx) (id *int64, denied, err error) {
	const q = `SELECT system_identifier FROM pg_control_system()`
	var v int64
	switch j.clusterProbe.Load() {
	case probeDenied:
		return nil, nil, nil
	case probeAllowed:
		if err := tx.QueryRow(ctx, q).Scan(&v); err != nil {
			return nil, nil, err
		}
		return &v, nil, nil
	}
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return nil, nil, err
	}
	if err := sp.QueryRow(ctx, q).Scan(&v); err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return nil, nil, rerr
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == insufficientPrivilege {
			j.clusterProbe.Store(probeDenied)
			return nil, err, nil
		}
		return nil, nil, err
	}
	if err := sp.Commit(ctx); err != nil { // releases the savepoint
		return nil, nil, err
	}
	j.clusterProbe.Store(probeAllowed)
	return &v, nil, nil
}

// insufficientPrivilege is PostgreSQL's SQLSTATE for a permission denied.
const insufficientPrivilege = "42501"

// Whether the database lets the job read its cluster's identifier
// (job.clusterProbe).
const (
	probeUnknown int32 = iota
	probeAllowed
	probeDenied
)

// firstSpan guesses the range of transaction ids of a Run's first batch,
// which has no density of events seen before to go by: the backlog estimate
// spread evenly over the window's ids. Without an estimate it starts small.
func firstSpan(lo, xmax uint64, backlog int64, want int) uint64 {
	if backlog <= 0 || xmax <= lo {
		return initialSpan
	}
	ids := float64(xmax - lo)
	return max(uint64(ids*float64(want)/float64(backlog)), 1)
}

// window is the WHERE condition on click_events.txid that selects the
// batch's transactions: the range [$1, $2), the stragglers and less the
// running ones (arrays numbered after the statement's fixed parameters, and
// left out when empty, which they nearly always are), with the arguments it
// adds.
func window(fixed int, stragglers, running []uint64) (string, []any) {
	cond := "txid >= $1::xid8 AND txid < $2::xid8"
	var args []any
	if len(stragglers) > 0 {
		args = append(args, xidArray(stragglers))
		cond = fmt.Sprintf("(%s OR txid = ANY ($%d::xid8[]))", cond, fixed+len(args))
	}
	if len(running) > 0 {
		args = append(args, xidArray(running))
		cond = fmt.Sprintf("%s AND txid <> ALL ($%d::xid8[])", cond, fixed+len(args))
	}
	return cond, args
}

// badRows is the condition of rejectSQL on the events that foldSQL did not
// count: a defect, clicked_at out of bounds, or one of the unknown links,
// passed as parameter $(fixed+1) when there are any.
func badRows(fixed int, unknown []int64) string {
	cond := "defect IS NOT NULL OR clicked_at > $3 OR clicked_at < $4"
	if len(unknown) > 0 {
		cond += fmt.Sprintf(" OR link_id = ANY ($%d::bigint[])", fixed+1)
	}
	return cond
}

// errNotLater marks a target snapshot that does not include everything the
// previous one did: folding towards it could count an event twice, or skip
// one for ever.
var errNotLater = errors.New("aggregator: new snapshot is not later than the previous one")

// refusedError is errNotLater with the stored position that was refused.
//
// On one cluster, snapshots only move forward, so errNotLater means the
// stored position comes from another cluster's numbering of transactions:
// typically a pg_dump restore into a new cluster, whose transaction ids are
// lower than the old one's. The check would pass again once this cluster's
// ids overtake the stored ones, but folding from that position would skip
// every event inserted meanwhile (their ids are "visible" in it). So the
// refusal is recorded with the position (click_aggregator_state.refused_prev),
// and every batch of every later term refuses the same stored position until
// someone resets it (docs/aggregator.md). A position no batch looked at
// before this cluster's ids overtook it is caught by fold's other guard: on
// another cluster (cluster_id), events numbered after the position
// (prev_max_id) that look finished in it.
type refusedError struct {
	prev string // click_aggregator_state.prev as text
	err  error  // wraps errNotLater
}

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// checkLater verifies that every transaction visible in prev is visible in
// target. Snapshots taken one after the other on one cluster always are; the
// check guards the exactly-once argument against a position from another
// cluster's numbering of transactions (see refusedError).
func checkLater(prev, target snapshot) error {
	if target.xmax < prev.xmax {
		return fmt.Errorf("%w: xmax %d < %d", errNotLater, target.xmax, prev.xmax)
	}
	for _, x := range target.xip {
		if prev.visible(x) {
			return fmt.Errorf("%w: %d is in progress in %s but finished in %s", errNotLater, x, target, prev)
		}
	}
	return nil
}
