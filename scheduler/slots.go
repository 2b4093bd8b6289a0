package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/configs"
)

// DefaultClaimTTL is how long a database-mode claim keeps other instances off
// a slot unless its claimer extends it (it does, every third of it, while the
// run goes on); a claimer that dies mid-run is replaced after it.
const DefaultClaimTTL = 10 * time.Minute

// errClaimLost ends a database-mode run whose claim another instance has
// taken, or which could not be extended before it ran out.
var errClaimLost = errors.New("the slot's claim was lost: another instance may run it")

// maxSlotsPerSweep bounds the work of one sweep over a long catch-up window of
// a frequent cron spec; the newest slots are kept.
const maxSlotsPerSweep = 10000

// claimer takes cron slots: with the term's token (leader mode) or with a
// fresh claim token (database mode).
type claimer interface {
	// claim takes slot if nobody has completed it and nobody else may still be
	// running it. It returns the token and fencing resource the run must use.
	claim(ctx context.Context, j *job, slot time.Time) (token int64, resource string, ok bool, err error)
	// skip records slots that never ran and will not (catch-up policy, or slots
	// from before the job's first start); it returns how many it recorded.
	skip(ctx context.Context, j *job, slots []time.Time) (int64, error)
	// hold keeps the claim taken at claimed (the claim's send time) while the
	// run goes on: it returns the run's context, which ends if the claim is
	// lost, the run's Valid, and the function that stops holding.
	hold(ctx context.Context, j *job, slot time.Time, token int64, claimed time.Time) (context.Context, func() bool, func())
	// release lets another instance take a slot this one stopped running.
	release(ctx context.Context, j *job, slot time.Time, token int64)
	leader() bool
}

// reclaimable is the condition under which an existing slot row may be taken
// again: a failed run after a back-off growing with its attempts (1 to 6
// minutes), or a running one whose claimer is known to be gone.
const failedRetry = `(cron_slots.state = 'failed' AND cron_slots.finished_at < now() - least(cron_slots.attempts, 6) * interval '1 minute')`

type leaderClaims struct {
	s     *Scheduler
	token int64
	term  func() bool
}

func (c leaderClaims) leader() bool { return true }

// hold: the term holds the slot; its context is already the run's.
func (c leaderClaims) hold(ctx context.Context, _ *job, _ time.Time, _ int64, _ time.Time) (context.Context, func() bool, func()) {
	return ctx, c.term, func() {}
}

func (c leaderClaims) claim(ctx context.Context, j *job, slot time.Time) (int64, string, bool, error) {
	var ok bool
	err := c.s.fence.Do(ctx, j.spec.Name, c.token, func(ctx context.Context, tx pgx.Tx) error {
		// A running row with a lower token was left by an earlier term: that
		// leader is gone (its term ended before ours began). One with our own
		// token is a run of ours whose completion was not recorded.
		tag, err := tx.Exec(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance) VALUES ($1, $2, 'running', $3, $4)
			ON CONFLICT (job, slot) DO UPDATE SET state = 'running', token = EXCLUDED.token, instance = EXCLUDED.instance,
				attempts = cron_slots.attempts + 1, claimed_at = now(), claim_until = NULL, finished_at = NULL, error = NULL
			WHERE (cron_slots.state = 'running' AND cron_slots.token <= EXCLUDED.token) OR `+failedRetry,
			j.spec.Name, slot, c.token, c.s.instance)
		ok = err == nil && tag.RowsAffected() == 1
		return err
	})
	return c.token, j.spec.Name, ok, err
}

func (c leaderClaims) skip(ctx context.Context, j *job, slots []time.Time) (int64, error) {
	var n int64
	err := c.s.fence.Do(ctx, j.spec.Name, c.token, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance, finished_at)
			SELECT $1, slot, 'skipped', $3, $4, now() FROM unnest($2::timestamptz[]) AS slot
			ON CONFLICT (job, slot) DO NOTHING`, j.spec.Name, slots, c.token, c.s.instance)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// release is not needed in leader mode: a successor's higher token takes the
// slot at once.
func (c leaderClaims) release(context.Context, *job, time.Time, int64) {}

type databaseClaims struct{ s *Scheduler }

func (c databaseClaims) leader() bool { return false }

// SlotResource is the fencing resource of the database-mode runs of job's
// slot: each slot is fenced separately, because claims of different slots
// have unrelated tokens, and a long run of one slot must not be refused
// because another instance has since claimed the next.
func SlotResource(job string, slot time.Time) string {
	return job + "@" + slot.UTC().Format(time.RFC3339)
}

func (c databaseClaims) claim(ctx context.Context, j *job, slot time.Time) (int64, string, bool, error) {
	var token int64
	err := c.s.cfg.Pool.QueryRow(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance, claim_until)
		VALUES ($1, $2, 'running', nextval('cron_claim_tokens'), $3, now() + make_interval(secs => $4))
		ON CONFLICT (job, slot) DO UPDATE SET state = 'running', token = EXCLUDED.token, instance = EXCLUDED.instance,
			attempts = cron_slots.attempts + 1, claimed_at = now(), claim_until = EXCLUDED.claim_until, finished_at = NULL, error = NULL
		WHERE (cron_slots.state = 'running' AND cron_slots.claim_until < now()) OR `+failedRetry+`
		RETURNING token`, j.spec.Name, slot, c.s.instance, c.s.claimTTL().Seconds()).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", false, nil
	}
	return token, SlotResource(j.spec.Name, slot), err == nil, err
}

func (c databaseClaims) skip(ctx context.Context, j *job, slots []time.Time) (int64, error) {
	tag, err := c.s.cfg.Pool.Exec(ctx, `INSERT INTO cron_slots (job, slot, state, token, instance, finished_at)
		SELECT $1, slot, 'skipped', nextval('cron_claim_tokens'), $3, now() FROM unnest($2::timestamptz[]) AS slot
		ON CONFLICT (job, slot) DO NOTHING`, j.spec.Name, slots, c.s.instance)
	return tag.RowsAffected(), err
}

func (c databaseClaims) release(ctx context.Context, j *job, slot time.Time, token int64) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.s.cfg.Pool.Exec(ctx, `UPDATE cron_slots SET claim_until = now()
		WHERE job = $1 AND slot = $2 AND token = $3 AND state = 'running'`, j.spec.Name, slot, token)
	if err != nil {
		j.log.Warn("cannot release the slot; another instance takes it over after the claim expires",
			"slot", slot, "err", err, "claim_ttl", c.s.claimTTL())
	}
}

// hold extends the claim every third of its TTL while the run goes on. The
// claim is known to last until the send time of the newest extension the
// database acknowledged plus the TTL (the database computes claim_until
// after that instant): the run's context ends a tenth of the TTL before that
// instant if no extension got through meanwhile, and at once if the row shows
// another instance's claim. A slot the job completed itself (CompleteSlot)
// needs holding no longer.
func (c databaseClaims) hold(ctx context.Context, j *job, slot time.Time, token int64, claimed time.Time) (context.Context, func() bool, func()) {
	ttl := c.s.claimTTL()
	margin := ttl / 10
	hctx, cancel := context.WithCancelCause(ctx)
	var mu sync.Mutex
	deadline, lost := claimed.Add(ttl-margin), false
	valid := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !lost && time.Now().Before(deadline)
	}
	lose := func() {
		mu.Lock()
		lost = true
		mu.Unlock()
		cancel(errClaimLost)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(ttl / 3)
		defer tick.Stop()
		expire := time.NewTimer(time.Until(deadline))
		defer expire.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-expire.C:
				j.log.Error("could not extend the slot's claim before it ran out; stopping the run", "slot", slot, "token", token, "claim_ttl", ttl)
				lose()
				return
			case <-tick.C:
			}
			sent := time.Now()
			ectx, ecancel := context.WithTimeout(hctx, ttl/3)
			var state string
			err := c.s.cfg.Pool.QueryRow(ectx, `UPDATE cron_slots
				SET claim_until = CASE WHEN state = 'running' THEN now() + make_interval(secs => $4) ELSE claim_until END
				WHERE job = $1 AND slot = $2 AND token = $3 RETURNING state`, j.spec.Name, slot, token, ttl.Seconds()).Scan(&state)
			ecancel()
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				j.log.Error("another instance has taken the slot's claim; stopping the run", "slot", slot, "token", token)
				lose()
				return
			case err != nil:
				if hctx.Err() == nil {
					j.log.Warn("cannot extend the slot's claim; retrying", "slot", slot, "token", token, "err", err)
				}
			case state != "running":
				return // completed by the job: nobody takes it again
			default:
				mu.Lock()
				deadline = sent.Add(ttl - margin)
				expire.Reset(time.Until(deadline))
				mu.Unlock()
			}
		}
	}()
	return hctx, valid, func() { cancel(nil); <-done }
}

// runDatabase runs a database-mode cron job: every instance sweeps, the unique
// slot row decides who runs each slot.
func (s *Scheduler) runDatabase(ctx context.Context, j *job) {
	_ = s.durableCron(ctx, j, databaseClaims{s: s})
}

// durableCron sweeps the job's slots at each fire time (and every minute, to
// retry failed slots and take over abandoned claims) until ctx ends. In leader
// mode it returns early when a run's error ends the lead.
func (s *Scheduler) durableCron(ctx context.Context, j *job, c claimer) error {
	for ctx.Err() == nil {
		if err := s.sweep(ctx, j, c); err != nil && c.leader() && endsLead(err) {
			return err
		}
		sleepUntil(ctx, j.spec.Schedule.Spec.Next(time.Now()))
	}
	return nil
}

// onTime is how late a slot may be and still run whatever the catch-up policy:
// it covers a failover at the slot instant.
func (s *Scheduler) onTime() time.Duration {
	d := time.Minute
	if s.cfg.Session != nil {
		d = max(d, 3*s.cfg.Session.Config().TTL)
	}
	return d
}

// sweep runs the job's due slots within the catch-up window that nobody has
// completed: the recent ones always, older never-attempted ones by the policy,
// failed or abandoned ones when the claim allows. Slots from before the job's
// first sweep are not "missed": that sweep records the latest slot due as
// skipped, however long ago (not only within the window: a weekly job with a
// day's window deployed on a Wednesday must run the next Monday), and runs
// nothing; history starts there. Slots missed longer ago than the window are
// recorded as skipped, logged and counted. It returns the first error that
// ends the lead.
func (s *Scheduler) sweep(ctx context.Context, j *job, c claimer) error {
	return s.sweepAt(ctx, j, c, time.Now())
}

func (s *Scheduler) sweepAt(ctx context.Context, j *job, c claimer, now time.Time) error {
	sch := j.spec.Schedule
	// A slot due within onTime runs whatever the window.
	windowStart := now.Add(-max(sch.CatchUpWindow, s.onTime()))
	hist, err := s.slotHistory(ctx, j, windowStart)
	if err != nil {
		j.log.Warn("cannot read cron slots; retrying at the next wake-up", "err", err)
		return nil
	}
	if hist.first.IsZero() {
		start := lastFireAtOrBefore(sch, now)
		if start.IsZero() {
			// Nothing fell due before (within historyLookback): every slot
			// from now on is the job's.
			start = now
		} else if _, err := c.skip(ctx, j, []time.Time{start}); err != nil {
			return err
		}
		hist.first, hist.last = start, start
	}
	if err := s.skipBeyondWindow(ctx, j, c, hist.last, windowStart); err != nil {
		return err
	}
	// Nothing before the first recorded slot counts, nor before the window.
	due := slotsBetween(sch, later(windowStart, hist.first), now)
	onTime := now.Add(-s.onTime())
	var missed, recent, retry []time.Time
	for _, slot := range due {
		switch st, seen := hist.states[slot.UnixNano()]; {
		case !seen && slot.Before(onTime):
			missed = append(missed, slot)
		case !seen:
			recent = append(recent, slot)
		case st == "running", st == "failed":
			retry = append(retry, slot) // the claim decides whether it may be taken
		}
	}
	var skip []time.Time
	switch n := len(missed); {
	case n == 0:
	case sch.CatchUp == configs.All:
		recent = append(missed, recent...)
	case sch.CatchUp == configs.Latest && len(recent) == 0:
		skip, recent = missed[:n-1], missed[n-1:]
	default: // None, or Latest with a newer slot due now
		skip = missed
	}
	if len(skip) > 0 {
		n, err := c.skip(ctx, j, skip)
		if err != nil {
			return err
		}
		if n > 0 {
			s.m.slotsMissed.WithLabelValues(j.spec.Name).Add(float64(n))
			j.log.Warn("cron slots missed while nobody ran the job; skipped by the catch-up policy",
				"skipped", n, "first", skip[0], "last", skip[len(skip)-1], "policy", sch.CatchUp)
		}
	}
	run := append(retry, recent...)
	slices.SortFunc(run, time.Time.Compare)
	for _, slot := range run {
		ran, err := s.runSlot(ctx, j, c, slot)
		if ran && slot.Before(onTime) {
			s.m.slotsCaughtUp.WithLabelValues(j.spec.Name).Inc()
		}
		if err != nil && (c.leader() && endsLead(err) || ctx.Err() != nil) {
			return err
		}
	}
	return nil
}

// skipBeyondWindow records as skipped the slots that fell due after last (the
// job's newest recorded slot) and before the catch-up window began: they were
// missed while nobody ran the job, longer ago than the policy catches up. It
// records the newest maxSlotsPerSweep of them and, unless another instance
// recorded them first, logs and counts them all.
func (s *Scheduler) skipBeyondWindow(ctx context.Context, j *job, c claimer, last, windowStart time.Time) error {
	if !last.Before(windowStart) {
		return nil
	}
	old, total := slotsIn(j.spec.Schedule, last, windowStart)
	if total == 0 {
		return nil
	}
	n, err := c.skip(ctx, j, old)
	if err != nil || n == 0 { // n == 0: another instance recorded them (database mode)
		return err
	}
	n += int64(total - len(old)) // too many to record, counted all the same
	s.m.slotsMissed.WithLabelValues(j.spec.Name).Add(float64(n))
	j.log.Warn("cron slots missed while nobody ran the job, before the catch-up window: skipped, not run",
		"skipped", n, "first", old[0], "last", old[len(old)-1], "catch_up_window", j.spec.Schedule.CatchUpWindow)
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// runSlot claims slot, runs the job for it and records the outcome. ran says
// whether this instance ran it.
func (s *Scheduler) runSlot(ctx context.Context, j *job, c claimer, slot time.Time) (ran bool, err error) {
	claimed := time.Now()
	token, resource, ok, err := c.claim(ctx, j, slot)
	if err != nil || !ok {
		return false, err
	}
	rctx, valid, unhold := c.hold(ctx, j, slot, token, claimed)
	r := s.newRun(j, token, slot, resource, valid)
	err = s.call(rctx, j, r)
	unhold()
	switch {
	case err == nil:
		s.finishSlot(ctx, j, r, "done", nil)
	case ctx.Err() != nil:
		// Stopped, not failed: leave it running for a successor (leader mode:
		// its higher token takes it; database mode: released now).
		c.release(context.WithoutCancel(ctx), j, slot, token)
	case !c.leader() || !endsLead(err):
		// In database mode nothing else ends: a panic, a refused write or a
		// lost claim fails the slot (retried after the back-off) rather
		// than leaving it claimed.
		s.finishSlot(ctx, j, r, "failed", err)
	}
	return true, err
}

// finishSlot records a slot's outcome, fenced by the run's token. A slot the job
// already completed in its own transaction is left as it is.
func (s *Scheduler) finishSlot(ctx context.Context, j *job, r *Run, state string, runErr error) {
	var msg *string
	if runErr != nil {
		m := runErr.Error()
		msg = &m
	}
	// Done even when the run's context has ended (a shutdown right after the
	// job returned), but then within half the job's grace, so that the term's
	// end is not held up by it: a slot left running is run again.
	timeout := 10 * time.Second
	if half := j.spec.Grace / 2; ctx.Err() != nil && half > 0 {
		timeout = min(timeout, half)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := r.Fenced(fctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE cron_slots SET state = $4, finished_at = now(), error = $5
			WHERE job = $1 AND slot = $2 AND token = $3 AND state = 'running'`, j.spec.Name, r.Slot, r.Token, state, msg)
		return err
	})
	if err != nil {
		j.log.Warn("cannot record the slot's outcome; it will be run again", "slot", r.Slot, "state", state, "err", err)
	}
}

// slotHistory is what cron_slots says about a job: its first and last
// recorded slots ever, and the state of each slot after from.
type slotHistory struct {
	first, last time.Time
	states      map[int64]string // by slot, UnixNano
}

func (s *Scheduler) slotHistory(ctx context.Context, j *job, from time.Time) (slotHistory, error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	h := slotHistory{states: map[int64]string{}}
	var first, last *time.Time
	if err := s.cfg.Pool.QueryRow(qctx, `SELECT min(slot), max(slot) FROM cron_slots WHERE job = $1`, j.spec.Name).Scan(&first, &last); err != nil {
		return h, fmt.Errorf("read cron slots of %s: %w", j.spec.Name, err)
	}
	if first == nil {
		return h, nil
	}
	h.first, h.last = *first, *last
	rows, err := s.cfg.Pool.Query(qctx, `SELECT slot, state FROM cron_slots WHERE job = $1 AND slot > $2`, j.spec.Name, from)
	if err != nil {
		return h, fmt.Errorf("read cron slots of %s: %w", j.spec.Name, err)
	}
	var slot time.Time
	var state string
	_, err = pgx.ForEachRow(rows, []any{&slot, &state}, func() error {
		h.states[slot.UnixNano()] = state
		return nil
	})
	return h, err
}

// slotsBetween lists the schedule's fire times in (from, to], oldest first,
// keeping at most maxSlotsPerSweep of the newest.
func slotsBetween(sch configs.Schedule, from, to time.Time) []time.Time {
	out, _ := slotsIn(sch, from, to)
	return out
}

// slotsIn is slotsBetween that also says how many fire times there were in
// all (the first of them is out[0] only when total <= maxSlotsPerSweep).
func slotsIn(sch configs.Schedule, from, to time.Time) (out []time.Time, total int) {
	for t := sch.Spec.Next(from); !t.IsZero() && !t.After(to); t = sch.Spec.Next(t) {
		out = append(out, t)
		total++
		if len(out) > maxSlotsPerSweep {
			out = out[1:]
		}
	}
	return out, total
}

// historyLookback bounds how far back a new job's first sweep looks for the
// slot its history starts at.
const historyLookback = 5 * 366 * 24 * time.Hour

// lastFireAtOrBefore is the schedule's latest fire time at or before t, or
// zero if there is none within historyLookback. It looks back over windows
// doubling from a minute until one holds a fire time, then bisects for the
// latest start whose next fire time is still at or before t (cron's
// resolution is a second): a few dozen Next calls for any spec.
func lastFireAtOrBefore(sch configs.Schedule, t time.Time) time.Time {
	fires := func(from time.Time) bool { f := sch.Spec.Next(from); return !f.IsZero() && !f.After(t) }
	for back := time.Minute; back <= 2*historyLookback; back *= 2 {
		lo, hi := t.Add(-back), t
		if !fires(lo) {
			continue
		}
		for hi.Sub(lo) > time.Second/2 {
			if mid := lo.Add(hi.Sub(lo) / 2); fires(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		return sch.Spec.Next(lo)
	}
	return time.Time{}
}
