// Package controls is the operators' controls over the jobs, kept in
// PostgreSQL (migration 0014) so that every instance of either leadership
// backend reads the same: a job paused (job_pauses: no instance runs it until
// it is resumed), an instance drained (instance_drains: it leads no singleton
// until it is undrained), and a job run now (manual_runs: one extra
// execution, exactly once across the cluster).
//
// The commands write them (PauseJob, ResumeJob, DrainInstance, UndrainInstance, RequestRun; Await
// follows a request); the instances read them through a Feed: a connection of
// its own that LISTENs on Channel, on which a trigger notifies every changed
// row at its commit, read again at each notification and every resync period
// (the renew interval) besides, and after every reconnection. A pause or a
// drain is durable: it outlives every instance until it is lifted.
//
// Manual runs. A request of a singleton is claimed by the instance that runs
// it: in leader mode by the job's leader, with its term's token, in a
// transaction fenced on the job's resource (ClaimLeader); in database mode
// by the instance whose update takes it, with a token from cron_claim_tokens
// (ClaimDatabase), for a claim period it extends while the run goes on. A
// running request whose claim is older than a new claimer's (a lower term's
// token; an expired database claim) is taken over and run again; the old
// claimer's completion, conditioned on its token, is then refused. A run
// whose job completes the request in its own transaction (Complete, through
// scheduler.Run.Complete) commits its effects only with that completion, so
// they commit at most once; at least once as long as an instance may run the
// job. A request of a job that runs everywhere is run once by each instance
// (a manual_run_reports row, inserted before the run) and closes once every
// instance of Expected that is still up has reported.
//
// What operators write (a reason, who asks) is capped, MaxReason and MaxBy
// characters, by CheckText for the commands and by migration 0015's
// constraints for anyone (a *TextTooLongError either way): every instance
// reads it at each notification, every status page shows it.
//
// What is not guaranteed: a run whose job does not complete the request in
// its own transaction may have committed some of its effects when its
// claimer died, and runs again under its successor (as a cron slot does); such
// jobs must be idempotent per request. A binary from before migration 0014
// ignores the controls.
package controls
