package controls

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// awaitPoll is how often Await reads the request without a notification.
const awaitPoll = time.Second

// Await waits until manual run request id is over (done or failed) or ctx
// ends, and returns it as last read (with ctx's error if it ended first).
// It reads it at each notification of the controls (on a connection of its
// own, made from db; without one it reads every second only) and every
// second besides; a request of a job that runs everywhere is closed here
// too once every expected instance still up has reported (an expected
// instance that went away is not waited for).
func Await(ctx context.Context, db *pgx.ConnConfig, pool *pgxpool.Pool, id int64) (ManualRun, error) {
	var conn *pgx.Conn
	if db != nil {
		c, err := pgx.ConnectConfig(ctx, db.Copy())
		if err == nil {
			if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{Channel}.Sanitize()); err == nil {
				conn = c
			}
		}
		if c != nil {
			defer func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				defer cancel()
				_ = c.Close(cctx)
			}()
		}
	}
	for {
		m, err := ReadRun(ctx, pool, id)
		if err != nil {
			return m, err
		}
		if !m.Closed() && m.Mode == "everywhere" {
			if closed, err := CloseReported(ctx, pool, id); err == nil && closed {
				continue
			}
		}
		if m.Closed() {
			return m, nil
		}
		wctx, cancel := context.WithTimeout(ctx, awaitPoll)
		if conn != nil && !conn.IsClosed() {
			_, _ = conn.WaitForNotification(wctx)
		} else {
			<-wctx.Done()
		}
		cancel()
		if ctx.Err() != nil {
			return m, ctx.Err()
		}
	}
}
