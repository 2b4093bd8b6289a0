// Package execjob is the built-in job type "exec": any program behind the
// singleton gate. Each run starts the job's program (options.command, no
// shell) under a supervisor process of its own (package supervisor), with
// an environment that is not the service's — a short allow-list, options.env
// and the contract's variables (Contract), the fencing token among them —
// and forwards its output to the service's log line by line, redacted and
// bounded.
//
// What is guaranteed: no process of a run's program outlives its term on a
// live host. When the run must stop (its term ends for any reason, its
// job is paused or its instance drained, its timeout passes, the service
// shuts down), every process of the program's tree — those that called
// setsid or double-forked included — gets SIGTERM, then SIGKILL after
// kill_grace, and the run returns only once every one is proven gone
// (waited for); the instance does not campaign for the job again before
// (scheduler.Settler). The supervisor, not frozen with snip-jobs, kills the
// tree at the term's deadline (on CLOCK_BOOTTIME, which counts a host's
// suspend) unless snip-jobs keeps extending it, and at once if snip-jobs
// dies: a frozen or killed snip-jobs leaves no program running past the
// point where another instance may begin a term. What the program writes
// through snip_jobs_fence (migration 0017) after a successor's first write
// is refused.
//
// What is NOT guaranteed: that the program stops gracefully — at a deadline
// reached while snip-jobs is frozen or cut off it gets SIGKILL without
// SIGTERM; that effects outside PostgreSQL are undone (an HTTP call the
// program made stays made); that a program running as another user (setuid)
// or a process it had another service start (over a socket) is stopped; or
// anything once the supervisor itself is SIGKILLed by someone else (the
// program, its direct child, still dies with it: Pdeathsig). A cron slot
// is completed after the program exits 0, not in its transaction: a program
// must be idempotent per slot (SNIP_JOBS_SLOT) to be run once.
package execjob
