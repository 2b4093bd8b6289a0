package controls

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/snip/snip-jobs/scheduler/slots"
)

// ErrClaimLost ends (as its context's cause) a database-mode manual run whose
// claim another instance has taken, or which could not be extended in time.
var ErrClaimLost = errors.New("the manual run's claim was lost: another instance may run it")

// Hold keeps a database-mode claim of request id (token, claimed at the
// claim's send time, for ttl) while its run goes on, by a cron slot's
// claim's rule (slots.Hold): it returns the run's context, which ends
// (ErrClaimLost) a tenth of ttl before the claim may run out unless an
// extension got through, or at once if the claim is another's; the run's
// Valid; and the function that stops holding.
func Hold(ctx context.Context, pool *pgxpool.Pool, id, token int64, claimed time.Time, ttl time.Duration, log *slog.Logger) (context.Context, func() bool, func()) {
	return slots.Hold(ctx, slots.Holding{
		What: "the manual run's claim", Claimed: claimed, TTL: ttl, Lost: ErrClaimLost,
		Log: log.With("manual_run", id, "token", token),
		Extend: func(ctx context.Context) (slots.Extended, error) {
			state, err := Extend(ctx, pool, id, token, ttl)
			switch {
			case err != nil:
				return slots.StillHeld, err
			case state == "":
				return slots.TakenOver, nil
			case state != StateRunning:
				return slots.Completed, nil
			}
			return slots.StillHeld, nil
		},
	})
}
