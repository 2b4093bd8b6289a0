package slots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/sleep"
)

// maxSlotsPerSweep bounds the work of one sweep over a long catch-up window of
// a frequent cron spec; the newest slots are kept.
const maxSlotsPerSweep = 10000

// Job is what the slots of one cron job depend on.
type Job struct {
	Name     string
	Schedule configs.Schedule // Kind Cron
	// Grace bounds the write of a slot's outcome after the run's context has
	// ended (half of it), so that a term's end is not held up by it.
	Grace time.Duration
	Log   *slog.Logger // with job and instance
}

// RunFunc runs the job once for a claimed slot, under ctx (which ends if the
// claim is lost), with valid reporting whether the claim still holds. It
// returns the job's error.
type RunFunc func(ctx context.Context, c Claim, valid func() bool) error

// Cron sweeps one job's durable slots. Its fields are its dependencies; all
// are required except the counters.
type Cron struct {
	Job    Job
	Claims Claims
	Pool   *pgxpool.Pool  // cron_slots is read through it
	Fence  *fencing.Fence // a slot's outcome is written fenced by its claim's token
	// OnTime is how late a slot may be and still run whatever the catch-up
	// policy: it covers a failover at the slot instant (a minute, or 3×TTL).
	OnTime time.Duration
	Run    RunFunc
	// EndsLead reports whether a run's error ends the term (leader mode): the
	// sweep then stops and returns it.
	EndsLead func(error) bool
	// Missed counts slots recorded skipped, missed while nobody ran the job;
	// CaughtUp counts a missed slot run late. nil: not counted.
	Missed   func(n int64)
	CaughtUp func()
}

// errNotValid is why a slot's outcome is not written: its claim (or term)
// no longer holds.
var errNotValid = errors.New("slots: the run's claim or term no longer holds")

// Loop sweeps the job's slots at each fire time (and every minute, to
// retry failed slots and take over abandoned claims) until ctx ends. In leader
// mode it returns early when a run's error ends the lead.
func (c *Cron) Loop(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := c.Sweep(ctx); err != nil && c.Claims.leader() && c.EndsLead(err) {
			return err
		}
		SleepUntil(ctx, c.Job.Schedule.Spec.Next(time.Now()))
	}
	return nil
}

// Sweep runs the job's due slots within the catch-up window that nobody has
// completed: the recent ones always, older never-attempted ones by the policy,
// failed or abandoned ones when the claim allows. Slots from before the job's
// first sweep are not "missed": that sweep records the latest slot due as
// skipped, however long ago (not only within the window: a weekly job with a
// day's window deployed on a Wednesday must run the next Monday), and runs
// nothing; history starts there. Slots missed longer ago than the window are
// recorded as skipped, logged and counted. It returns the first error that
// ends the lead.
func (c *Cron) Sweep(ctx context.Context) error {
	return c.SweepAt(ctx, time.Now())
}

// SweepAt is Sweep as if the time were now.
func (c *Cron) SweepAt(ctx context.Context, now time.Time) error {
	j := &c.Job
	sch := j.Schedule
	// A slot due within OnTime runs whatever the window.
	windowStart := now.Add(-max(sch.CatchUpWindow, c.OnTime))
	hist, err := c.history(ctx, windowStart)
	if err != nil {
		j.Log.Warn("cannot read cron slots; retrying at the next wake-up", "err", err)
		return nil
	}
	if hist.first.IsZero() {
		start := lastFireAtOrBefore(sch, now)
		if start.IsZero() {
			// Nothing fell due before (within historyLookback): every slot
			// from now on is the job's.
			start = now
		} else if _, err := c.Claims.skip(ctx, j, []time.Time{start}); err != nil {
			return err
		}
		hist.first, hist.last = start, start
	}
	if err := c.skipBeyondWindow(ctx, hist.last, windowStart); err != nil {
		return err
	}
	// Nothing before the first recorded slot counts, nor before the window.
	due := slotsBetween(sch, later(windowStart, hist.first), now)
	onTime := now.Add(-c.OnTime)
	run, skip := plan(due, hist.states, onTime, sch.CatchUp)
	if len(skip) > 0 {
		n, err := c.Claims.skip(ctx, j, skip)
		if err != nil {
			return err
		}
		if n > 0 {
			c.missed(n)
			j.Log.Warn("cron slots missed while nobody ran the job; skipped by the catch-up policy",
				"skipped", n, "first", skip[0], "last", skip[len(skip)-1], "policy", sch.CatchUp)
		}
	}
	for _, slot := range run {
		late := slot.Before(onTime) // caught up, not run on time
		ran, err := c.runSlot(ctx, slot, late)
		if ran && late && c.CaughtUp != nil {
			c.CaughtUp()
		}
		if err != nil && (c.Claims.leader() && c.EndsLead(err) || ctx.Err() != nil) {
			return err
		}
	}
	return nil
}

// plan decides what a sweep does with the due slots, given their recorded
// states: it runs, oldest first, those never attempted that fell due after
// onTime, those failed or still running (their claim decides whether they
// may be taken), and the missed ones (never attempted, due before onTime)
// the policy catches up; it records the other missed ones skipped.
func plan(due []time.Time, states map[int64]string, onTime time.Time, policy configs.CatchUpPolicy) (run, skip []time.Time) {
	var missed, recent, retry []time.Time
	for _, slot := range due {
		switch st, seen := states[slot.UnixNano()]; {
		case !seen && slot.Before(onTime):
			missed = append(missed, slot)
		case !seen:
			recent = append(recent, slot)
		case st == "running", st == "failed":
			retry = append(retry, slot) // the claim decides whether it may be taken
		}
	}
	switch n := len(missed); {
	case n == 0:
	case policy == configs.All:
		recent = append(missed, recent...)
	case policy == configs.Latest && len(recent) == 0:
		skip, recent = missed[:n-1], missed[n-1:]
	default: // None, or Latest with a newer slot due now
		skip = missed
	}
	run = append(retry, recent...)
	slices.SortFunc(run, time.Time.Compare)
	return run, skip
}

// skipBeyondWindow records as skipped the slots that fell due after last (the
// job's newest recorded slot) and before the catch-up window began: they were
// missed while nobody ran the job, longer ago than the policy catches up. It
// records the newest maxSlotsPerSweep of them and, unless another instance
// recorded them first, logs and counts them all.
func (c *Cron) skipBeyondWindow(ctx context.Context, last, windowStart time.Time) error {
	j := &c.Job
	if !last.Before(windowStart) {
		return nil
	}
	old, total := slotsIn(j.Schedule, last, windowStart)
	if total == 0 {
		return nil
	}
	n, err := c.Claims.skip(ctx, j, old)
	if err != nil || n == 0 { // n == 0: another instance recorded them (database mode)
		return err
	}
	n += int64(total - len(old)) // too many to record, counted all the same
	c.missed(n)
	j.Log.Warn("cron slots missed while nobody ran the job, before the catch-up window: skipped, not run",
		"skipped", n, "first", old[0], "last", old[len(old)-1], "catch_up_window", j.Schedule.CatchUpWindow)
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// runSlot claims slot, runs the job for it and records the outcome; late
// marks the run a catch-up (Claim.CatchUp). ran says whether this instance
// ran it.
func (c *Cron) runSlot(ctx context.Context, slot time.Time, late bool) (ran bool, err error) {
	j := &c.Job
	claimed := time.Now()
	cl, ok, err := c.Claims.claim(ctx, j, slot)
	if err != nil || !ok {
		return false, err
	}
	cl.CatchUp = late
	rctx, valid, unhold := c.Claims.hold(ctx, j, cl, claimed)
	err = c.Run(rctx, cl, valid)
	unhold()
	switch {
	case err == nil:
		c.finish(ctx, cl, valid, "done", nil)
	case ctx.Err() != nil:
		// Stopped, not failed: leave it running for a successor (leader mode:
		// its higher token takes it; database mode: released now).
		c.Claims.release(context.WithoutCancel(ctx), j, cl)
	case !c.Claims.leader() || !c.EndsLead(err):
		// In database mode nothing else ends: a panic, a refused write or a
		// lost claim fails the slot (retried after the back-off) rather
		// than leaving it claimed.
		c.finish(ctx, cl, valid, "failed", err)
	}
	return true, err
}

// finish records a slot's outcome, fenced by the claim's token (not tried
// once the claim no longer holds). A slot the job already completed in its
// own transaction is left as it is.
func (c *Cron) finish(ctx context.Context, cl Claim, valid func() bool, state string, runErr error) {
	j := &c.Job
	var msg *string
	if runErr != nil {
		m := runErr.Error()
		msg = &m
	}
	// Done even when the run's context has ended (a shutdown right after the
	// job returned), but then within half the job's grace, so that the term's
	// end is not held up by it: a slot left running is run again.
	timeout := 10 * time.Second
	if half := j.Grace / 2; ctx.Err() != nil && half > 0 {
		timeout = min(timeout, half)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := errNotValid
	if valid() {
		err = c.Fence.Do(fctx, cl.Resource, cl.Token, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE cron_slots SET state = $4, finished_at = now(), error = $5
				WHERE job = $1 AND slot = $2 AND token = $3 AND state = 'running'`, j.Name, cl.Slot, cl.Token, state, msg)
			return err
		})
	}
	if err != nil {
		j.Log.Warn("cannot record the slot's outcome; it will be run again", "slot", cl.Slot, "state", state, "err", err)
	}
}

// slotHistory is what cron_slots says about a job: its first and last
// recorded slots ever, and the state of each slot after from.
type slotHistory struct {
	first, last time.Time
	states      map[int64]string // by slot, UnixNano
}

func (c *Cron) history(ctx context.Context, from time.Time) (slotHistory, error) {
	name := c.Job.Name
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	h := slotHistory{states: map[int64]string{}}
	var first, last *time.Time
	if err := c.Pool.QueryRow(qctx, `SELECT min(slot), max(slot) FROM cron_slots WHERE job = $1`, name).Scan(&first, &last); err != nil {
		return h, fmt.Errorf("read cron slots of %s: %w", name, err)
	}
	if first == nil {
		return h, nil
	}
	h.first, h.last = *first, *last
	rows, err := c.Pool.Query(qctx, `SELECT slot, state FROM cron_slots WHERE job = $1 AND slot > $2`, name, from)
	if err != nil {
		return h, fmt.Errorf("read cron slots of %s: %w", name, err)
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

// Between lists the schedule's fire times in (from, to], oldest first, at
// most the newest 10,000 of them, and how many there were in all: the slots
// a sweep would consider (an operator's resume records those that fell due
// while the job was paused).
func Between(sch configs.Schedule, from, to time.Time) (newest []time.Time, total int) {
	return slotsIn(sch, from, to)
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

// SleepUntil waits until the wall-clock instant t, re-checking every minute so
// that a clock step is noticed. It reports whether t was reached (not ctx's end
// or a re-check).
func SleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	sleep.For(ctx, min(d, time.Minute))
	return d <= time.Minute && ctx.Err() == nil && !time.Now().Before(t)
}

func (c *Cron) missed(n int64) {
	if c.Missed != nil {
		c.Missed(n)
	}
}
