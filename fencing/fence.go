package fencing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrStaleToken matches (errors.Is) every refused write: each *StaleTokenError,
// and the rare refusal whose stored token could not be read afterwards.
var ErrStaleToken = errors.New("fencing: stale token")

// ErrInvalidArgument is wrapped by the errors Do returns for arguments it
// cannot act on (empty resource, token <= 0, nil function, a Fence without a
// pool or holder).
var ErrInvalidArgument = errors.New("fencing: invalid argument")

// StaleTokenError says that a write was refused because a newer term (a higher
// token) has already written to the resource.
type StaleTokenError struct {
	Resource string
	Token    int64  // the refused writer's token
	Current  int64  // the token stored for the resource
	Holder   string // the instance that wrote with Current
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fencing: write to %q with token %d refused: token %d (holder %q) has already written to it",
		e.Resource, e.Token, e.Current, e.Holder)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Fence runs fenced transactions for one instance. It is safe for concurrent
// use.
type Fence struct {
	pool       *pgxpool.Pool
	holder     string
	onReject   func(resource string, token, current int64)
	idle       time.Duration
	breakAfter time.Duration
	onBreak    func(StaleHolder)
}

// StaleHolder is a fenced writer with a lower token whose transaction was
// ended because it held the resource's row (WithStaleHolderBreak).
type StaleHolder struct {
	Resource    string
	Token       int64 // the waiting writer's
	HolderToken int64 // the ended transaction's
	HolderPID   int32 // its PostgreSQL backend
}

// Option configures a Fence.
type Option func(*Fence)

// WithRejectHook calls f each time Do refuses a write as stale (for metrics),
// after the transaction has been rolled back and before Do returns. current is
// the stored token, or 0 if reading it failed.
func WithRejectHook(f func(resource string, token, current int64)) Option {
	return func(fe *Fence) { fe.onReject = f }
}

// WithIdleTimeout makes PostgreSQL end a fenced transaction that sits idle
// (between statements) longer than d, releasing the resource's row. A leader
// cut off from etcd whose database link is slow or broken may hold the row
// after its term ended, and its successor's first write waits for that row:
// this bounds the wait by d instead of by TCP timeouts. Pick d above the
// longest pause a job makes between statements inside Do (the scheduler uses
// the lease TTL). 0 (the default) leaves PostgreSQL's setting alone.
func WithIdleTimeout(d time.Duration) Option {
	return func(fe *Fence) { fe.idle = d }
}

// WithStaleHolderBreak makes a writer that has waited d for the resource's row
// end the transaction holding it when that transaction is a fenced write with a
// lower token (pg_terminate_backend; the same database role may do so), and
// again every d while it waits. Such a holder belongs to a term that is over —
// a newer token exists only once the older term has ended — typically a leader
// cut off from etcd whose database link is slow or gone, whose transaction
// PostgreSQL would otherwise keep open (and the row locked) until the idle
// timeout or TCP gives up. Its write is rolled back, never half-applied: this
// is the fence doing early what it would do anyway. A holder with the same or
// a higher token, or any other lock holder, is left alone. onBreak (may be
// nil) is called for each transaction ended, on a goroutine of its own and
// possibly just after the waiting writer's Do has returned. 0 (the default)
// never ends one.
//
// Every fenced transaction names its token in its application_name for
// that purpose (" fence-token=N" after the first 30 characters of the
// connection's own name), which also shows operators in pg_stat_activity
// which term holds a resource's row.
func WithStaleHolderBreak(d time.Duration, onBreak func(StaleHolder)) Option {
	return func(fe *Fence) { fe.breakAfter, fe.onBreak = d, onBreak }
}

// New returns a Fence writing through pool. holder (this instance's name) is
// recorded with every token it advances, so that a refused writer learns who
// wrote last. The table fencing_tokens must exist (package migrations).
func New(pool *pgxpool.Pool, holder string, opts ...Option) *Fence {
	f := &Fence{pool: pool, holder: holder}
	for _, o := range opts {
		o(f)
	}
	return f
}

const (
	// advanceSQL inserts the resource's row or advances its token; it returns
	// a row only when the write may go ahead. ON CONFLICT DO UPDATE locks the
	// existing row before testing the WHERE, and at READ COMMITTED a writer
	// that waited for that lock tests the row as the other writer committed
	// it; the lock is held, whether or not the row was updated, until the
	// transaction ends. snip_jobs_fence (migration 0017) runs this statement
	// for programs: change both (TestGoAndSQLWritersFollowOneRule).
	advanceSQL = `INSERT INTO fencing_tokens AS f (resource, token, holder)
VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE
	SET token = EXCLUDED.token, holder = EXCLUDED.holder, updated_at = now()
	WHERE f.token <= EXCLUDED.token
RETURNING true`

	currentSQL = `SELECT token, holder FROM fencing_tokens WHERE resource = $1`

	// nameSQL marks the transaction's backend with its token, until it ends.
	// snip_jobs_fence names a program's the same way, for breakSQL.
	nameSQL = `SELECT set_config('application_name', left(current_setting('application_name'), 30) || ' fence-token=' || $1, true)`

	// breakSQL ends the fenced transactions with a token below $2 that block
	// backend $1, and returns them. pg_terminate_backend is in the select list
	// on purpose: there it runs only for the rows the WHERE kept, whereas in
	// the WHERE the planner may evaluate it (the cheapest test) first, on
	// every backend.
	breakSQL = `SELECT a.pid, h.token, pg_terminate_backend(a.pid) FROM pg_stat_activity a,
	LATERAL (SELECT substring(a.application_name FROM ' fence-token=([0-9]+)$')::bigint AS token) h
WHERE a.pid = ANY (pg_blocking_pids($1::int)) AND h.token < $2`
)

// Do runs fn in one transaction that first advances the resource's token to
// token, unless a higher token is stored already. In that case Do rolls back
// and returns a *StaleTokenError without calling fn. Otherwise fn runs with the
// transaction; its error rolls everything back (the token advance included)
// and is returned wrapped. fn must not commit or roll back tx itself. If fn
// returns nil the transaction is committed, and a failed commit is returned.
//
// The resource's row stays locked until Do returns: other fenced writers of
// the same resource wait. ctx bounds everything; when it ends, the transaction
// is rolled back (or the connection dropped, which also rolls it back).
func (f *Fence) Do(ctx context.Context, resource string, token int64, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if f.pool == nil {
		return fmt.Errorf("%w: Fence has no pool", ErrInvalidArgument)
	}
	return f.do(ctx, f.pool, resource, token, fn)
}

// DoOn is Do on conn, a connection the caller owns, instead of one of the
// Fence's pool: for statements that may leave state on their session (SET
// ROLE, set_config(…, false), temporary tables, session-level advisory locks)
// which no other user of the pool may inherit. The caller closes conn, which
// must be idle (not in a transaction).
func (f *Fence) DoOn(ctx context.Context, conn *pgx.Conn, resource string, token int64, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if conn == nil {
		return fmt.Errorf("%w: nil connection for %q", ErrInvalidArgument, resource)
	}
	return f.do(ctx, conn, resource, token, fn)
}

// beginner is what a fenced transaction starts on: the Fence's pool, or a
// caller's connection (DoOn).
type beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

func (f *Fence) do(ctx context.Context, db beginner, resource string, token int64, fn func(ctx context.Context, tx pgx.Tx) error) error {
	switch {
	case f.holder == "":
		return fmt.Errorf("%w: Fence has an empty holder name", ErrInvalidArgument)
	case resource == "":
		return fmt.Errorf("%w: empty resource name", ErrInvalidArgument)
	case token <= 0:
		return fmt.Errorf("%w: token %d for %q: tokens are positive", ErrInvalidArgument, token, resource)
	case fn == nil:
		return fmt.Errorf("%w: nil function for %q", ErrInvalidArgument, resource)
	}

	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("fencing: %q: begin: %w", resource, err)
	}
	// After a successful Commit this is a no-op (pgx.ErrTxClosed). On every
	// other path, a panic in fn included, it rolls back; if ctx is done pgx
	// closes the connection instead, which rolls back at the server.
	defer func() { _ = tx.Rollback(ctx) }()

	err = f.advance(ctx, tx, resource, token)
	if errors.Is(err, pgx.ErrNoRows) {
		// The row is locked by us now: what we read is what is stored.
		current, holder, cerr := Current(ctx, tx, resource)
		_ = tx.Rollback(ctx) // release the row before the hook runs
		if f.onReject != nil {
			f.onReject(resource, token, current)
		}
		if cerr != nil {
			// Stale all the same: a higher token is stored.
			return fmt.Errorf("%w: %q: token %d refused, and reading the stored token failed: %w", ErrStaleToken, resource, token, cerr)
		}
		return &StaleTokenError{Resource: resource, Token: token, Current: current, Holder: holder}
	}
	if err != nil {
		return fmt.Errorf("fencing: %q: advance token to %d: %w", resource, token, err)
	}

	if err := fn(ctx, tx); err != nil {
		return fmt.Errorf("fencing: %q (token %d): %w", resource, token, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("fencing: %q (token %d): commit: %w", resource, token, err)
	}
	return nil
}

// advance runs advanceSQL (pgx.ErrNoRows: a higher token is stored),
// preceded by the statements that name the transaction's token and, when the
// Fence has an idle timeout, set it for this transaction: all in one round
// trip (a pipeline), so that they cost nothing on a slow link. While it waits
// for the row, stale holders are broken (WithStaleHolderBreak).
func (f *Fence) advance(ctx context.Context, tx pgx.Tx, resource string, token int64) error {
	var b pgx.Batch
	b.Queue(nameSQL, strconv.FormatInt(token, 10))
	if f.idle > 0 {
		b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true)`,
			strconv.FormatInt(max(f.idle.Milliseconds(), 1), 10))
	}
	b.Queue(advanceSQL, resource, token, f.holder)
	if f.breakAfter > 0 {
		stop := f.breakStaleHolders(ctx, tx.Conn().Config(), resource, token, int32(tx.Conn().PgConn().PID()))
		defer stop()
	}
	br := tx.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("name the transaction: %w", err)
	}
	if f.idle > 0 {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("set the idle timeout: %w", err)
		}
	}
	var ok bool
	return br.QueryRow().Scan(&ok)
}

// breakStaleHolders, every f.breakAfter until stop is called, ends the fenced
// transactions with a lower token that block backend pid. It connects on its
// own (with cfg, the waiting transaction's connection's), outside the pool, and only once the wait has lasted f.breakAfter: a
// pool whose connections all wait behind stale holders could not lend it one.
// Its failures are left to the next attempt (the wait goes on as without it).
//
// stop returns at once: it ends the waiting and a connection attempt, not a
// break query in flight. That query finishes on its own (within
// breakQueryMax), so that a holder it terminated is always reported — the
// write it unblocked returns, and calls stop, as soon as the holder is gone,
// which may be before the query's answer has been read — and so that the
// write's transaction never waits for it: over a slow link a round trip may
// take seconds, and the transaction would sit idle (holding the resource's
// row, and perhaps past its idle timeout) meanwhile.
func (f *Fence) breakStaleHolders(ctx context.Context, cfg *pgx.ConnConfig, resource string, token int64, pid int32) (stop func()) {
	wait, endWait := context.WithCancel(ctx)
	go func() {
		t := time.NewTimer(f.breakAfter)
		defer t.Stop()
		var conn *pgx.Conn
		ended := map[int32]bool{} // reported already
		defer func() {
			if conn != nil {
				cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
				_ = conn.Close(cctx)
				ccancel()
			}
		}()
		for {
			select {
			case <-wait.Done():
				return
			case <-t.C:
			}
			t.Reset(f.breakAfter)
			if conn == nil || conn.IsClosed() {
				var err error
				if conn, err = pgx.ConnectConfig(wait, cfg.Copy()); err != nil {
					conn = nil
					continue
				}
			}
			f.breakOnce(ctx, conn, resource, token, pid, ended)
		}
	}()
	return endWait
}

// breakQueryMax bounds one break query, which outlives the caller's context.
const breakQueryMax = 30 * time.Second

// breakOnce runs breakSQL once and reports each holder it ended that is not
// in ended already, and adds it there. (A terminated backend takes a moment to
// exit: the next query may find it still holding the row, and terminate it
// again.)
func (f *Fence) breakOnce(ctx context.Context, conn *pgx.Conn, resource string, token int64, pid int32, ended map[int32]bool) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), breakQueryMax)
	defer cancel()
	rows, _ := conn.Query(qctx, breakSQL, pid, token)
	defer rows.Close()
	for rows.Next() {
		h := StaleHolder{Resource: resource, Token: token}
		var signalled bool
		if rows.Scan(&h.HolderPID, &h.HolderToken, &signalled) != nil || !signalled || ended[h.HolderPID] {
			continue
		}
		ended[h.HolderPID] = true
		if f.onBreak != nil {
			f.onBreak(h)
		}
	}
}

// Querier is what Current reads through: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Current returns the highest token stored for resource and the holder that
// wrote it; 0 and "" when no fenced write has ever been made to it.
func Current(ctx context.Context, q Querier, resource string) (token int64, holder string, err error) {
	err = q.QueryRow(ctx, currentSQL, resource).Scan(&token, &holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("fencing: read token of %q: %w", resource, err)
	}
	return token, holder, nil
}
