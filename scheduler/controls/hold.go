package controls

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrClaimLost ends (as its context's cause) a database-mode manual run whose
// claim another instance has taken, or which could not be extended in time.
var ErrClaimLost = errors.New("the manual run's claim was lost: another instance may run it")

// Hold keeps a database-mode claim of request id (token, claimed at the
// claim's send time, for ttl) while its run goes on, extending it every third
// of ttl: it returns the run's context, which ends (ErrClaimLost) a tenth of
// ttl before the claim may run out unless an extension got through, or at
// once if the claim is another's; the run's Valid; and the function that
// stops holding. The rule is a cron slot's claim's (package slots).
func Hold(ctx context.Context, pool *pgxpool.Pool, id, token int64, claimed time.Time, ttl time.Duration, log *slog.Logger) (context.Context, func() bool, func()) {
	h := &holder{pool: pool, id: id, token: token, ttl: ttl, log: log, deadline: claimed.Add(ttl - ttl/10)}
	var hctx context.Context
	hctx, h.cancel = context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() { defer close(done); h.extend(hctx) }()
	return hctx, h.valid, func() { h.cancel(nil); <-done }
}

type holder struct {
	pool      *pgxpool.Pool
	id, token int64
	ttl       time.Duration
	log       *slog.Logger
	cancel    context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time
	lost     bool
}

func (h *holder) valid() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.lost && time.Now().Before(h.deadline)
}

func (h *holder) lose(why string) {
	h.log.Error(why+"; stopping the run", "manual_run", h.id, "token", h.token, "claim_ttl", h.ttl)
	h.mu.Lock()
	h.lost = true
	h.mu.Unlock()
	h.cancel(ErrClaimLost)
}

func (h *holder) extend(hctx context.Context) {
	tick := time.NewTicker(h.ttl / 3)
	defer tick.Stop()
	h.mu.Lock()
	expire := time.NewTimer(time.Until(h.deadline))
	h.mu.Unlock()
	defer expire.Stop()
	for {
		select {
		case <-hctx.Done():
			return
		case <-expire.C:
			h.lose("could not extend the manual run's claim before it ran out")
			return
		case <-tick.C:
		}
		sent := time.Now()
		ectx, cancel := context.WithTimeout(hctx, h.ttl/3)
		state, err := Extend(ectx, h.pool, h.id, h.token, h.ttl)
		cancel()
		switch {
		case err != nil:
			if hctx.Err() == nil {
				h.log.Warn("cannot extend the manual run's claim; retrying", "manual_run", h.id, "err", err)
			}
		case state == "":
			h.lose("another instance has taken the manual run's claim")
			return
		case state != StateRunning:
			return // completed by its job: nobody takes it again
		default:
			h.mu.Lock()
			h.deadline = sent.Add(h.ttl - h.ttl/10)
			expire.Reset(time.Until(h.deadline))
			h.mu.Unlock()
		}
	}
}
