package execjob

import (
	"strconv"
	"time"

	"github.com/snip/snip-jobs/scheduler"
)

// contractPrefix starts the names of the contract's variables.
const contractPrefix = "SNIP_JOBS_"

// The contract's variables: what every run of a program is told.
const (
	EnvJob       = "SNIP_JOBS_JOB"        // the job's name
	EnvInstance  = "SNIP_JOBS_INSTANCE"   // the instance running it
	EnvRun       = "SNIP_JOBS_RUN_ID"     // the run's id in job_runs (snip-jobs history); empty if unrecorded
	EnvTrigger   = "SNIP_JOBS_TRIGGER"    // schedule, catch-up or manual
	EnvManualRun = "SNIP_JOBS_MANUAL_RUN" // the operator's request (snip-jobs run JOB); empty for the schedule's
	EnvSlot      = "SNIP_JOBS_SLOT"       // the cron slot the run is for (RFC 3339, UTC); empty for other schedules
	EnvToken     = "SNIP_JOBS_TOKEN"      // the fencing token; 0 for a job that runs everywhere
	EnvResource  = "SNIP_JOBS_RESOURCE"   // the fencing resource to pass to snip_jobs_fence
	EnvDeadline  = "SNIP_JOBS_DEADLINE"   // the term's deadline when the run began (RFC 3339, UTC, this host's clock); empty: none
)

// Contract is the program's contract, on one screen: what `snip-jobs run
// --help` and docs/operations.md ("Programs as jobs") say.
const Contract = `A job of type exec runs a program (options.command: an absolute path and its
arguments, no shell) once per run of its schedule, on the instance that
holds the job's term (a singleton) or on every instance. Its environment is
not the service's: PATH, LANG, LC_ALL and TZ (if they hold no secret),
options.env, and:

  SNIP_JOBS_JOB, SNIP_JOBS_INSTANCE   the job and the instance running it
  SNIP_JOBS_RUN_ID                    the run's id in snip-jobs history
  SNIP_JOBS_TRIGGER                   schedule, catch-up or manual
  SNIP_JOBS_MANUAL_RUN                the operator's request id (snip-jobs run JOB), or empty
  SNIP_JOBS_SLOT                      the cron slot it is for (RFC 3339, UTC), or empty
  SNIP_JOBS_TOKEN                     the fencing token (0 for a job that runs everywhere)
  SNIP_JOBS_RESOURCE                  the fencing resource: in your own transaction,
                                      SELECT snip_jobs_fence($SNIP_JOBS_RESOURCE, $SNIP_JOBS_TOKEN)
                                      before your writes; it raises when a newer term has written
  SNIP_JOBS_DEADLINE                  the term's deadline when the run began (RFC 3339), or empty

Exit 0 is success; anything else fails the run, and snip-jobs history shows
the exit status (or signal) and the last lines of output; a failed cron slot
is retried as the job's catch-up policy says. stdout and stderr reach the
service's log line by line (job, run and token on each; lines cut at 4 KiB;
at most 100 lines a second, the rest counted and dropped; secrets redacted).

When the term ends (resign, drain, pause, lost lease, shutdown), or the run
passes options.timeout, every process the program started — those that
called setsid or double-forked too — gets SIGTERM, then SIGKILL after
options.kill_grace, and is waited for before another instance can begin a
term of the job. A per-run supervisor does it even if snip-jobs itself is
frozen or killed: at the term's deadline, with SIGKILL. Write programs that
can be killed at any instant and fence their writes.`

// contractEnv is the contract's variables for run r, whose term's deadline
// was deadline when it began (zero: none).
func contractEnv(r *scheduler.Run, deadline time.Time) []string {
	opt := func(v string, set bool) string {
		if set {
			return v
		}
		return ""
	}
	return []string{
		EnvJob + "=" + r.Job,
		EnvInstance + "=" + r.Instance,
		EnvRun + "=" + opt(strconv.FormatInt(r.ID(), 10), r.ID() != 0),
		EnvTrigger + "=" + string(r.Trigger),
		EnvManualRun + "=" + opt(strconv.FormatInt(r.ManualRun, 10), r.ManualRun != 0),
		EnvSlot + "=" + opt(r.Slot.UTC().Format(time.RFC3339), !r.Slot.IsZero()),
		EnvToken + "=" + strconv.FormatInt(r.Token, 10),
		EnvResource + "=" + r.Resource(),
		EnvDeadline + "=" + opt(deadline.UTC().Format(time.RFC3339Nano), !deadline.IsZero()),
	}
}
