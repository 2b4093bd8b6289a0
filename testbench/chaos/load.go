package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/internal/sleep"
)

// load is the traffic the service works on while faults happen: a stream of
// click events (mostly valid, some invalid, some in transactions held open so
// that they commit out of id order) and custom domains added one by one. It
// writes straight to PostgreSQL, as the redirect servers and the main app do;
// what committed is read back from the database by the checker, so a write
// whose commit failed (PostgreSQL restarting) needs no bookkeeping here.
type load struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clicks  atomic.Int64 // events in transactions that reported a commit
	failed  atomic.Int64 // transactions that failed
	domains atomic.Int64
}

func startLoad(ctx context.Context, pool *pgxpool.Pool) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{cancel: cancel}
	for w := range 2 {
		l.wg.Go(func() { l.clickWriter(ctx, pool, w) })
	}
	l.wg.Go(func() { l.domainWriter(ctx, pool) })
	return l
}

// txTimeout bounds a click transaction (PostgreSQL restarting, or stalled).
const txTimeout = 30 * time.Second

func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *load) clickWriter(ctx context.Context, pool *pgxpool.Pool, w int) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
	for ctx.Err() == nil {
		n := 1 + rng.IntN(5)
		hold := time.Duration(0)
		if rng.IntN(50) == 0 { // committed late: a low id after higher ones
			hold = time.Duration(500+rng.IntN(2500)) * time.Millisecond
		}
		// Stopping the load ends the loop, never a transaction in flight: a
		// COMMIT cancelled on the client can still commit at the server after
		// stop has returned, when the aggregator has been seen caught up
		// (one event left uncounted in a CI run). The hold is cut short.
		txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txTimeout)
		err := pgx.BeginFunc(txCtx, pool, func(tx pgx.Tx) error {
			for range n {
				link, country := any(int64(1+rng.IntN(20))), "FR"
				switch rng.IntN(40) {
				case 0:
					link = nil // null_link
				case 1:
					link = int64(999) // unknown_link
				case 2:
					country = "zz" // bad_country
				}
				if _, err := tx.Exec(txCtx, `INSERT INTO click_events (link_id, referrer_host, country) VALUES ($1, 'example.org', $2)`, link, country); err != nil {
					return err
				}
			}
			sleep.For(ctx, hold)
			return nil
		})
		cancel()
		if err != nil {
			l.failed.Add(1)
		} else {
			l.clicks.Add(int64(n))
		}
		sleep.For(ctx, time.Duration(10+rng.IntN(30))*time.Millisecond)
	}
}

func (l *load) domainWriter(ctx context.Context, pool *pgxpool.Pool) {
	for i := 1; ctx.Err() == nil; i++ {
		d := fmt.Sprintf("d%d.chaos.test", i)
		if _, err := pool.Exec(ctx, `INSERT INTO custom_domains (domain, status) VALUES ($1, 'active') ON CONFLICT DO NOTHING`, d); err != nil {
			i-- // PostgreSQL restarting: try the same name again
		} else {
			l.domains.Add(1)
		}
		sleep.For(ctx, 4*time.Second)
	}
}
