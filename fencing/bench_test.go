package fencing_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/fencing"
)

// The cost of the fence: one single-row insert per op, fenced and not. The
// shared test cluster runs with fsync and synchronous_commit off, so commits
// are cheaper than on a durable server and the fence's share looks larger.

const benchInsert = "INSERT INTO reports (resource, token, body) VALUES ($1, $2, $3)"

// BenchmarkFencedWrite uses the Fence as the scheduler configures it: an idle
// timeout and the stale-holder break (two more statements in the advance's
// round trip, and a timer per write).
func BenchmarkFencedWrite(b *testing.B) {
	ctx := context.Background()
	d := newDB(b)
	f := fencing.New(d.pool("bench"), "node-a", fencing.WithIdleTimeout(30*time.Second), fencing.WithStaleHolderBreak(time.Second, nil))
	insert := insertReport("bench", 1, "row")
	for b.Loop() {
		if err := f.Do(ctx, "bench", 1, insert); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnfencedWrite is the same insert without the fence: in a
// transaction of its own (what Do adds the upsert to), and as a single
// autocommitted statement.
func BenchmarkUnfencedWrite(b *testing.B) {
	ctx := context.Background()
	d := newDB(b)
	pool := d.pool("bench")
	b.Run("tx", func(b *testing.B) {
		for b.Loop() {
			err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, benchInsert, "bench", 1, "row")
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("autocommit", func(b *testing.B) {
		for b.Loop() {
			if _, err := pool.Exec(ctx, benchInsert, "bench", 1, "row"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFencedWriteParallel shows the row lock at work: writers of one
// resource queue behind each other, writers of distinct resources do not.
func BenchmarkFencedWriteParallel(b *testing.B) {
	ctx := context.Background()
	d := newDB(b)
	f := fencing.New(d.pool("bench"), "node-a")
	b.Run("same resource", func(b *testing.B) {
		insert := insertReport("bench", 1, "row")
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := f.Do(ctx, "bench", 1, insert); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("own resource", func(b *testing.B) {
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			res := fmt.Sprintf("bench-%d", n.Add(1))
			insert := insertReport(res, 1, "row")
			for pb.Next() {
				if err := f.Do(ctx, res, 1, insert); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
