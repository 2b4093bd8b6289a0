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
	pool     *pgxpool.Pool
	holder   string
	onReject func(resource string, token, current int64)
	idle     time.Duration
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
	// transaction ends.
	advanceSQL = `INSERT INTO fencing_tokens AS f (resource, token, holder)
VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE
	SET token = EXCLUDED.token, holder = EXCLUDED.holder, updated_at = now()
	WHERE f.token <= EXCLUDED.token
RETURNING true`

	currentSQL = `SELECT token, holder FROM fencing_tokens WHERE resource = $1`
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
	switch {
	case f.pool == nil:
		return fmt.Errorf("%w: Fence has no pool", ErrInvalidArgument)
	case f.holder == "":
		return fmt.Errorf("%w: Fence has an empty holder name", ErrInvalidArgument)
	case resource == "":
		return fmt.Errorf("%w: empty resource name", ErrInvalidArgument)
	case token <= 0:
		return fmt.Errorf("%w: token %d for %q: tokens are positive", ErrInvalidArgument, token, resource)
	case fn == nil:
		return fmt.Errorf("%w: nil function for %q", ErrInvalidArgument, resource)
	}

	tx, err := f.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("fencing: %q: begin: %w", resource, err)
	}
	// After a successful Commit this is a no-op (pgx.ErrTxClosed). On every
	// other path, a panic in fn included, it rolls back; if ctx is done pgx
	// closes the connection instead, which rolls back at the server.
	defer func() { _ = tx.Rollback(ctx) }()

	if chaosBrokenNoCheck { // false except in the chaos_broken build (chaos_normal.go)
		if err := fn(ctx, tx); err != nil {
			return fmt.Errorf("fencing: %q (token %d): %w", resource, token, err)
		}
		return tx.Commit(ctx)
	}

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
// preceded, when the Fence has an idle timeout, by the statement that sets it
// for this transaction: both in one round trip (a pipeline), so that the
// timeout costs nothing on a slow link.
func (f *Fence) advance(ctx context.Context, tx pgx.Tx, resource string, token int64) error {
	var b pgx.Batch
	if f.idle > 0 {
		b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true)`,
			strconv.FormatInt(max(f.idle.Milliseconds(), 1), 10))
	}
	b.Queue(advanceSQL, resource, token, f.holder)
	br := tx.SendBatch(ctx, &b)
	defer br.Close()
	if f.idle > 0 {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("set the idle timeout: %w", err)
		}
	}
	var ok bool
	return br.QueryRow().Scan(&ok)
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
