// Package slots runs a cron job's scheduled instants durably: each instant is
// a slot row in cron_slots, unique per (job, slot), claimed before the job
// runs for it and marked done (or failed) after.
//
// Guarantee: a slot that fell due while its job had a runner is run, and is
// run by one claim at a time. A claim is fenced: in leader mode by the term's
// token (Leader: the claim, the skip records and the outcome are fenced
// writes on the job's resource, so a stale term's are refused), in database
// mode by a claim token from a PostgreSQL sequence (Database: every instance
// sweeps, the unique row decides who runs, and the run's writes are fenced on
// Resource(job, slot)); database mode needs no etcd. A database-mode claim
// lasts its TTL (DefaultClaimTTL) and is extended while its run goes on; the
// run's context ends (ErrClaimLost) if the claim is taken or cannot be
// extended in time. A failed slot is retried after a back-off of one to six
// minutes; a stopped one is left for a successor.
//
// Catch-up: a sweep runs the due slots of the catch-up window that nobody
// completed. A slot due within OnTime (a minute, or 3×TTL) runs whatever the
// policy, so a failover at the slot instant neither skips nor doubles it;
// older missed slots run or are recorded skipped by the policy (latest, all,
// none); slots missed before the window are recorded skipped and counted. A
// job's first sweep records the latest slot due as skipped and runs nothing:
// its history starts there.
//
// Limits: a job that does not complete its slot in its own transaction
// (Complete) may run a slot twice if the process dies between the job's
// commit and the slot's; such jobs must be idempotent per slot. A slot that
// fell due while no instance ran the job and older than the catch-up window
// is never run. Slots are computed on the wall clock; a clock step is noticed
// within a minute (SleepUntil).
package slots
