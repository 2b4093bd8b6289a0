package kubelease_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/testdb"
	"github.com/snip/snip-jobs/internal/testenv"
)

// A leader that checked Valid, then paused (its client cut off, so it cannot
// renew) while a successor took over and wrote, wakes and writes with its old
// token: real PostgreSQL, through package fencing, refuses that write, and
// only the successor's row is there.
func TestAPausedLeadersWriteIsRefusedByTheFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := testdb.New(t)
	testdb.Exec(t, url, "CREATE TABLE reports (token bigint NOT NULL, body text NOT NULL)")
	insert := func(token int64, body string) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO reports (token, body) VALUES ($1, $2)", token, body)
			return err
		}
	}
	ns := namespace(t, api)
	var c cut
	a := start(t, api, ns, "a", cutBy(&c))
	b := start(t, api, ns, "b")
	ta := won(t, campaign(a, "weekly"))
	fa, fb := fencing.New(pool, "a"), fencing.New(pool, "b")
	if err := fa.Do(ctx, "weekly", ta.Token(), insert(ta.Token(), "a before the pause")); err != nil {
		t.Fatal(err)
	}
	if !ta.Valid() {
		t.Fatal("the leader's term is not valid before the pause")
	}
	wb := campaign(b, "weekly")
	waitWaiting(t, b)
	c.on.Store(true) // the pause: from here on a neither renews nor checks
	tb := won(t, wb)
	if err := fb.Do(ctx, "weekly", tb.Token(), insert(tb.Token(), "b")); err != nil {
		t.Fatal(err)
	}
	err := fa.Do(ctx, "weekly", ta.Token(), insert(ta.Token(), "a after the pause"))
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("the paused leader's write after the takeover: %v, want %v", err, fencing.ErrStaleToken)
	}
	if n := testenv.Value[int](t, pool, "SELECT count(*) FROM reports WHERE body = 'a after the pause'"); n != 0 {
		t.Errorf("the stale write left %d rows", n)
	}
	if n := testenv.Value[int](t, pool, "SELECT count(*) FROM reports WHERE token = $1", tb.Token()); n != 1 {
		t.Errorf("the successor's write left %d rows, want 1", n)
	}
}
