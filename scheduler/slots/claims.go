package slots

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/fencing"
)

// DefaultClaimTTL is how long a database-mode claim keeps other instances off
// a slot unless its claimer extends it (it does, every third of it, while the
// run goes on); a claimer that dies mid-run is replaced after it.
const DefaultClaimTTL = 10 * time.Minute

// ErrClaimLost ends (as its context's cause) a database-mode run whose claim
// another instance has taken, or which could not be extended before it ran out.
var ErrClaimLost = errors.New("the slot's claim was lost: another instance may run it")

// Claim is a slot this instance may run: the token and the fencing resource
// the run's writes must use.
type Claim struct {
	Slot     time.Time
	Token    int64
	Resource string
	// CatchUp is set by the sweep that runs the slot late: it fell due
	// before the on-time window (Cron.OnTime) as the sweep began, so it is
	// caught up (a missed slot the policy runs, or a failed or abandoned
	// one taken again) rather than run on time. Cron.CaughtUp counts these.
	CatchUp bool
}

// Claims takes cron slots: with a term's token (Leader) or with a fresh claim
// token per slot (Database).
type Claims interface {
	// claim takes slot if nobody has completed it and nobody else may still be
	// running it.
	claim(ctx context.Context, j *Job, slot time.Time) (c Claim, ok bool, err error)
	// skip records slots that never ran and will not (catch-up policy, or slots
	// from before the job's first start); it returns how many it recorded.
	skip(ctx context.Context, j *Job, slots []time.Time) (int64, error)
	// hold keeps the claim taken at claimed (the claim's send time) while the
	// run goes on: it returns the run's context, which ends if the claim is
	// lost, the run's Valid, and the function that stops holding.
	hold(ctx context.Context, j *Job, c Claim, claimed time.Time) (context.Context, func() bool, func())
	// release lets another instance take a slot this one stopped running.
	release(ctx context.Context, j *Job, c Claim)
	leader() bool
}

// failedRetry is the condition under which an existing slot row that failed
// may be taken again: after a back-off growing with its attempts (1 to 6
// minutes).
const failedRetry = `(cron_slots.state = 'failed' AND cron_slots.finished_at < now() - least(cron_slots.attempts, 6) * interval '1 minute')`

// Leader is the claims of a leader-mode term: every claim is fenced by the
// term's token on the job's resource, and holds while the term is valid.
func Leader(fence *fencing.Fence, instance string, token int64, valid func() bool) Claims {
	return leaderClaims{fence: fence, instance: instance, token: token, term: valid}
}

type leaderClaims struct {
	fence    *fencing.Fence
	instance string
	token    int64
	term     func() bool
}

func (c leaderClaims) leader() bool { return true }

// hold: the term holds the slot; its context is already the run's.
func (c leaderClaims) hold(ctx context.Context, _ *Job, _ Claim, _ time.Time) (context.Context, func() bool, func()) {
	return ctx, c.term, func() {}
}

func (c leaderClaims) claim(ctx context.Context, j *Job, slot time.Time) (Claim, bool, error) {
	var ok bool
	err := c.fence.Do(ctx, j.Name, c.token, func(ctx context.Context, tx pgx.Tx) error {
		// A running row with a lower token was left by an earlier term: that
		// leader is gone (its term ended before ours began). One with our own
		// token is a run of ours whose completion was not recorded.
		tag, err := tx.Exec(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ($1, $2, 'running', $3, $4)
			ON CONFLICT (job, slot) DO UPDATE SET state = 'running', token = EXCLUDED.token, instance = EXCLUDED.instance,
				attempts = cron_slots.attempts + 1, claimed_at = now(), claim_until = NULL, finished_at = NULL, error = NULL
			WHERE (cron_slots.state = 'running' AND cron_slots.token <= EXCLUDED.token) OR `+failedRetry,
			j.Name, slot, c.token, c.instance)
		ok = err == nil && tag.RowsAffected() == 1
		return err
	})
	return Claim{Slot: slot, Token: c.token, Resource: j.Name}, ok, err
}

func (c leaderClaims) skip(ctx context.Context, j *Job, slots []time.Time) (int64, error) {
	var n int64
	err := c.fence.Do(ctx, j.Name, c.token, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance, finished_at)
			SELECT $1, slot, 'skipped', $3, $4, now() FROM unnest($2::timestamptz[]) AS slot
			ON CONFLICT (job, slot) DO NOTHING`, j.Name, slots, c.token, c.instance)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// release is not needed in leader mode: a successor's higher token takes the
// slot at once.
func (c leaderClaims) release(context.Context, *Job, Claim) {}

// Database is the claims of database mode: the unique slot row decides who
// runs, with a claim token from a PostgreSQL sequence, for ttl (0:
// DefaultClaimTTL) unless extended.
func Database(pool *pgxpool.Pool, instance string, ttl time.Duration) Claims {
	if ttl <= 0 {
		ttl = DefaultClaimTTL
	}
	return databaseClaims{pool: pool, instance: instance, ttl: ttl}
}

type databaseClaims struct {
	pool     *pgxpool.Pool
	instance string
	ttl      time.Duration
}

func (c databaseClaims) leader() bool { return false }

// Resource is the fencing resource of the database-mode runs of job's
// slot: each slot is fenced separately, because claims of different slots
// have unrelated tokens, and a long run of one slot must not be refused
// because another instance has since claimed the next.
func Resource(job string, slot time.Time) string {
	return job + "@" + slot.UTC().Format(time.RFC3339)
}

func (c databaseClaims) claim(ctx context.Context, j *Job, slot time.Time) (Claim, bool, error) {
	var token int64
	// No claim while an operator has paused the job or drained this
	// instance (migration 0014): the claim and the pause are decided by the
	// same database, so none is taken after the pause's commit.
	err := c.pool.QueryRow(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance, claim_until)
		SELECT $1, $2, 'running', nextval('cron_claim_tokens'), $3, now() + make_interval(secs => $4)
		WHERE NOT EXISTS (SELECT FROM job_pauses WHERE job = $1) AND NOT EXISTS (SELECT FROM instance_drains WHERE instance = $3)
		ON CONFLICT (job, slot) DO UPDATE SET state = 'running', token = EXCLUDED.token, instance = EXCLUDED.instance,
			attempts = cron_slots.attempts + 1, claimed_at = now(), claim_until = EXCLUDED.claim_until, finished_at = NULL, error = NULL
		WHERE (cron_slots.state = 'running' AND cron_slots.claim_until < now()) OR `+failedRetry+`
		RETURNING token`, j.Name, slot, c.instance, c.ttl.Seconds()).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return Claim{}, false, nil
	}
	return Claim{Slot: slot, Token: token, Resource: Resource(j.Name, slot)}, err == nil, err
}

func (c databaseClaims) skip(ctx context.Context, j *Job, slots []time.Time) (int64, error) {
	tag, err := c.pool.Exec(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance, finished_at)
		SELECT $1, slot, 'skipped', nextval('cron_claim_tokens'), $3, now() FROM unnest($2::timestamptz[]) AS slot
		ON CONFLICT (job, slot) DO NOTHING`, j.Name, slots, c.instance)
	return tag.RowsAffected(), err
}

func (c databaseClaims) release(ctx context.Context, j *Job, cl Claim) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.pool.Exec(ctx, `UPDATE cron_slots SET claim_until = now()
		WHERE job = $1 AND slot = $2 AND token = $3 AND state = 'running'`, j.Name, cl.Slot, cl.Token)
	if err != nil {
		j.Log.Warn("cannot release the slot; another instance takes it over after the claim expires",
			"slot", cl.Slot, "err", err, "claim_ttl", c.ttl)
	}
}

// hold keeps the slot's claim while its run goes on (Hold).
func (c databaseClaims) hold(ctx context.Context, j *Job, cl Claim, claimed time.Time) (context.Context, func() bool, func()) {
	return Hold(ctx, Holding{
		What: "the slot's claim", Claimed: claimed, TTL: c.ttl, Lost: ErrClaimLost,
		Log: j.Log.With("slot", cl.Slot, "token", cl.Token),
		Extend: func(ctx context.Context) (Extended, error) {
			var state string
			err := c.pool.QueryRow(ctx, `UPDATE cron_slots
				SET claim_until = CASE WHEN state = 'running' THEN now() + make_interval(secs => $4) ELSE claim_until END
				WHERE job = $1 AND slot = $2 AND token = $3 RETURNING state`, j.Name, cl.Slot, cl.Token, c.ttl.Seconds()).Scan(&state)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return TakenOver, nil
			case err != nil:
				return StillHeld, err
			case state != "running":
				return Completed, nil
			}
			return StillHeld, nil
		},
	})
}

// Complete marks slot of job done inside the caller's transaction, if it is
// still claimed with token: the job's output and the slot's completion then
// commit together.
func Complete(ctx context.Context, tx pgx.Tx, job string, slot time.Time, token int64) error {
	tag, err := tx.Exec(ctx, `UPDATE cron_slots SET state = 'done', finished_at = now(), error = NULL
		WHERE job = $1 AND slot = $2 AND token = $3`, job, slot, token)
	if err != nil {
		return fmt.Errorf("complete slot %s of %s: %w", slot.Format(time.RFC3339), job, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("complete slot %s of %s: the slot is not claimed with token %d", slot.Format(time.RFC3339), job, token)
	}
	return nil
}
