package slots

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Extended is what one extension of a database-mode claim found.
type Extended int

const (
	// StillHeld: extended, the claim lasts its TTL from the extension's send time.
	StillHeld Extended = iota
	// TakenOver: the claim is another claimer's now.
	TakenOver
	// Completed: its run completed it; nobody takes it again.
	Completed
)

// Holding is a database-mode claim to keep while its run goes on: a cron
// slot's, or a manual run's (package controls).
type Holding struct {
	// What names the claim in log lines ("the slot's claim").
	What string
	// Claimed is the claim's send time; TTL how long a claim or an
	// extension lasts from its send time (the database computes the claim's
	// end after that instant).
	Claimed time.Time
	TTL     time.Duration
	// Extend extends the claim by TTL, if it is still the holder's.
	Extend func(ctx context.Context) (Extended, error)
	// Lost is the run's context's cause when the claim is lost.
	Lost error
	Log  *slog.Logger
}

// Hold extends the claim every third of its TTL while the run goes on. It
// returns the run's context, which ends (h.Lost) a tenth of the TTL before
// the claim may run out unless an extension got through meanwhile, and at
// once when another claimer has it; the run's Valid; and the function that
// stops holding. A claim its run completed needs holding no longer.
func Hold(ctx context.Context, h Holding) (context.Context, func() bool, func()) {
	k := &keeper{Holding: h, deadline: h.Claimed.Add(h.TTL - h.TTL/10)}
	var kctx context.Context
	kctx, k.cancel = context.WithCancelCause(context.WithValue(ctx, keeperKey{}, k))
	done := make(chan struct{})
	go func() { defer close(done); k.extend(kctx) }()
	return kctx, k.valid, func() { k.cancel(nil); <-done }
}

// keeperKey marks the context of a run that holds a claim (Hold).
type keeperKey struct{}

// Deadline is when the claim held for the run whose context is ctx stops
// being valid unless extended first (a tenth of its TTL before it may run
// out); zero when ctx holds no claim, or the claim was completed (nobody can
// take it over any more).
func Deadline(ctx context.Context) time.Time {
	k, _ := ctx.Value(keeperKey{}).(*keeper)
	if k == nil {
		return time.Time{}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.completed {
		return time.Time{}
	}
	return k.deadline
}

// keeper keeps one claim.
type keeper struct {
	Holding
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	deadline  time.Time // a tenth of the TTL before the claim may run out
	lost      bool
	completed bool // its run completed it: nobody can take it over any more
}

func (k *keeper) valid() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return !k.lost && (k.completed || time.Now().Before(k.deadline))
}

func (k *keeper) lose(why string) {
	k.Log.Error(why+"; stopping the run", "claim_ttl", k.TTL)
	k.mu.Lock()
	k.lost = true
	k.mu.Unlock()
	k.cancel(k.Lost)
}

// extend renews the claim every third of its TTL until kctx ends, the claim
// is lost or runs out, or the run completed it.
func (k *keeper) extend(kctx context.Context) {
	tick := time.NewTicker(k.TTL / 3)
	defer tick.Stop()
	k.mu.Lock()
	expire := time.NewTimer(time.Until(k.deadline))
	k.mu.Unlock()
	defer expire.Stop()
	for {
		select {
		case <-kctx.Done():
			return
		case <-expire.C:
			k.lose("could not extend " + k.What + " before it ran out")
			return
		case <-tick.C:
		}
		sent := time.Now()
		ectx, cancel := context.WithTimeout(kctx, k.TTL/3)
		got, err := k.Extend(ectx)
		cancel()
		switch {
		case err != nil:
			if kctx.Err() == nil {
				k.Log.Warn("cannot extend "+k.What+"; retrying", "err", err)
			}
		case got == TakenOver:
			k.lose("another instance has taken " + k.What)
			return
		case got == Completed:
			k.mu.Lock()
			k.completed = true
			k.mu.Unlock()
			return
		default:
			k.mu.Lock()
			k.deadline = sent.Add(k.TTL - k.TTL/10)
			expire.Reset(time.Until(k.deadline))
			k.mu.Unlock()
		}
	}
}
