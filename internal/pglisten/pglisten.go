// Package pglisten keeps one PostgreSQL connection LISTENing on a channel
// for a reader that mirrors rows in memory (the renewer's certificates and
// challenges, the operators' controls). It connects, LISTENs, then hands
// the connection to the reader's session until that returns an error, and
// connects again after a back-off: 100 ms doubling to 5 s, back to 100 ms
// after a session that read once. LISTEN comes before the session's first
// read, so a row committed in between is both read and notified, never
// missed. It is the reader's only way to PostgreSQL: what it keeps is as
// current as its last read, and says so through ended.
package pglisten

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/internal/sleep"
)

// The back-off between connections after an error.
const (
	MinRetry = 100 * time.Millisecond
	MaxRetry = 5 * time.Second
)

// ErrReconnect ends a session that wants a new connection at once, without
// a back-off (pgx closes a connection whose wait was cancelled).
var ErrReconnect = errors.New("pglisten: reconnect")

// Session reads on a listening connection until an error; read says
// whether it read everything at least once.
type Session func(ctx context.Context, conn *pgx.Conn) (read bool, err error)

// Run keeps a connection LISTENing on channel, with a copy of db, and runs
// session on it, until ctx ends; it returns ctx's error. After each session
// but the last it calls ended with the session's error and the wait before
// the next connection (0 for ErrReconnect).
func Run(ctx context.Context, db *pgx.ConnConfig, channel string, session Session, ended func(err error, retryIn time.Duration)) error {
	wait := MinRetry
	for {
		read, err := listen(ctx, db, channel, session)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrReconnect):
			ended(err, 0)
			continue
		}
		ended(err, wait)
		if !sleep.For(ctx, wait) {
			return ctx.Err()
		}
		wait = min(2*wait, MaxRetry)
		if read {
			wait = MinRetry
		}
	}
}

// listen is one connection's life.
func listen(ctx context.Context, db *pgx.ConnConfig, channel string, session Session) (read bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, db.Copy())
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, fmt.Errorf("listen on %s: %w", channel, err)
	}
	return session(ctx, conn)
}
