// Package scheduler runs the jobs of a config file: every job on every instance,
// or — for a singleton — only while this instance holds the job's term.
//
// Data flows one way: config → scheduler → term → job → fenced write. For each
// singleton in leader mode the scheduler campaigns (package leadership); while
// it holds the term it runs the job's schedule under the term's context and
// hands each execution a Run carrying the term's fencing token; when the term
// ends it cancels the job, waits up to the job's grace period (counting and
// logging an overrun), resigns so a successor starts at once, and campaigns
// again. A panic in a job is recovered and ends the term by resignation, as does
// a watchdog that saw no Run.Progress for progress_timeout.
//
// Schedules: continuous (Run until the term ends, restarted with back-off if it
// returns), interval (every + jitter, counted from the last run of any instance,
// as recorded in PostgreSQL) and cron (robfig/cron v3 spec in a time zone).
//
// Durable cron (package slots): each scheduled instant is a slot row in
// cron_slots, unique per (job, slot), claimed with a fencing token before the
// job runs and marked done after it (or inside the job's own transaction,
// Run.CompleteSlot). A new leader first sweeps the catch-up window: slots that
// fell due within the last minute (or 3×TTL) run whatever the policy, so a
// failover at the slot instant neither skips nor doubles it; older missed
// slots run or are marked skipped by the policy (latest, all, none). In
// database mode every instance sweeps and the unique slot row decides who
// runs, with a claim token from a PostgreSQL sequence; it needs no etcd. A
// claim is taken over after ten minutes without completion.
//
// Spread: no live instance leads two more singletons than another. An
// instance that leads more than some other live instance holds back before
// campaigning, and one that leads at least two more than the least loaded
// hands one term over (one at a time, only the first of the most loaded by
// name), so 2/2/0 becomes 2/1/1 and stays there (docs/scheduling.md argues
// why it converges without flapping). Equally loaded instances never hold
// back, so failover pays nothing.
//
// The code goes by concern: the runner runs a job's executions by its schedule
// (schedule.go; a durable cron job's slots through package slots), the
// lifecycle leads a singleton's terms (lifecycle.go), spread keeps the share
// fair (spread.go), the recorder writes job_terms, job_runs (each run with
// its Run.Trigger: schedule, catch-up or manual) and fence_rejections
// (records.go), and package status reads them back. The
// scheduler reaches etcd only through the Session interface, which
// *leadership.Session satisfies.
//
// What is NOT guaranteed: that a job stops when its term ends. Go cannot stop
// a goroutine; a job that ignores its context keeps running after the grace
// period (counted as an overrun). Its writes through Run.Fenced are refused
// once a successor has written, which is what makes that safe. Effects outside
// PostgreSQL need their own defences. A cron job that does not complete its
// slot in its own transaction may run a slot twice if the process dies between
// the job's commit and the slot's; such jobs must be idempotent per slot.
package scheduler
