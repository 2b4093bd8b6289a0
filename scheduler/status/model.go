package status

import (
	"fmt"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/controls"
)

// Cluster is the cluster's state of a config file's jobs: the body of
// `snip-jobs status --json`.
type Cluster struct {
	Instances []Instance `json:"instances"`
	Jobs      []Job      `json:"jobs"`
	// LeadersKnown is false when the leadership backend was not read (none
	// configured, or it did not answer): then no job's leader is known.
	LeadersKnown bool `json:"leaders_known"`
	// Backend is the leadership backend read: "etcd" or "kubernetes"; ""
	// when none is configured.
	Backend string `json:"backend,omitempty"`
	// Drained are the instances an operator has drained (snip-jobs drain),
	// up or not: they lead no singleton until undrained.
	Drained []controls.Drain `json:"drained"`
	Errors  []string         `json:"errors,omitempty"`
}

// Job is one job of a config file.
type Job struct {
	Name      string `json:"job"`
	Type      string `json:"type"`
	Singleton bool   `json:"singleton"`
	// Mode is everywhere (not a singleton), leader (a singleton led through
	// terms of the leadership backend) or database (a singleton cron job whose slots PostgreSQL decides).
	Mode     string `json:"mode"`
	Schedule string `json:"schedule"`
	// Leading: a term of the job is held (in an instance's own view: by this
	// instance), with Token since Since.
	Leading bool      `json:"leading"`
	Token   int64     `json:"token,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	// Headroom is the time left until the term's deadline (an instance's own
	// view only).
	Headroom time.Duration `json:"headroom_ns,omitempty"`
	// Leader is the holder of the job's term as the leadership backend says
	// (the cluster's view); nil when nobody holds it, or it was not read.
	Leader   *Leader     `json:"leader"`
	LastRun  *RunRecord  `json:"last_run"`
	LastSlot *SlotRecord `json:"last_slot"`
	// Paused is the job's pause (snip-jobs pause): who, since when, why;
	// nil while it runs.
	Paused *controls.Pause `json:"paused,omitempty"`
	// ManualRun is the job's open manual run request (snip-jobs run JOB):
	// pending, or running on its claimer; nil when there is none.
	ManualRun *controls.Request `json:"manual_run,omitempty"`
}

// Leader is the holder of a job's term: on etcd, of its leader key; on
// Kubernetes, the incarnation its job Lease names while that incarnation's
// instance Lease still names it too.
type Leader struct {
	Instance string    `json:"instance"`
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	Token    int64     `json:"token"`
	Since    time.Time `json:"since"` // the leader's wall clock when it won
	// Lease is, on etcd, its lease ID in hex as etcdctl prints it; on
	// Kubernetes, the name of its instance Lease.
	Lease string `json:"lease"`
	// LeaseTTLSeconds is what etcd says is left on the leader's lease (whole
	// seconds): near the TTL while the leader renews, counting down once it
	// stopped. 0 on Kubernetes, where no server counts down: see Renewed.
	LeaseTTLSeconds float64 `json:"lease_ttl_seconds"`
	// Holder and Renewed (Kubernetes only): the incarnation holding the
	// instance Lease and its renewTime. See Instance.Renewed.
	Holder  string    `json:"holder,omitempty"`
	Renewed time.Time `json:"renewed,omitzero"`
}

// Instance is a snip-jobs instance. On etcd, Read lists those up:
// registered on a live lease. On Kubernetes it lists those whose instance
// Lease is held (not released at shutdown nor judged gone by a peer), and Up
// is a one-shot reader's guess (see Renewed).
type Instance struct {
	Name string `json:"instance"`
	Up   bool   `json:"up"`
	// Host, PID and Started are from its registration (the instance's wall
	// clock), while it is up.
	Host    string    `json:"host,omitempty"`
	PID     int       `json:"pid,omitempty"`
	Started time.Time `json:"started,omitzero"`
	// Lease is, on etcd, the lease ID in hex as etcdctl prints it; on
	// Kubernetes, the instance Lease's name.
	Lease string `json:"lease,omitempty"`
	// LeaseTTLSeconds is what etcd says is left on its lease, of
	// LeaseGrantedSeconds: a running instance renews it every renew
	// interval; one that stopped renewing (killed, paused, cut off from etcd)
	// stays listed while it counts down to 0. On Kubernetes, LeaseTTLSeconds
	// is 0 (no server counts down) and LeaseGrantedSeconds is the Lease's
	// leaseDurationSeconds.
	LeaseTTLSeconds     float64 `json:"lease_ttl_seconds"`
	LeaseGrantedSeconds float64 `json:"lease_granted_seconds"`
	// Leads is the number of jobs it leads now (as the backend says).
	Leads int `json:"leads"`
	// Holder and Renewed (Kubernetes only): the incarnation holding the
	// instance Lease, and its renewTime, the instance's wall clock at its
	// last renewal. Peers judge an instance gone by seeing its Lease
	// unchanged for its duration on their own clock, which a one-shot read
	// cannot do: Up is Renewed no older than the duration by the reader's
	// wall clock (and not leaving), as good as the two hosts' clocks agree.
	// It is for people; nothing decides on it.
	Holder  string    `json:"holder,omitempty"`
	Renewed time.Time `json:"renewed,omitzero"`
	// Drained is its drain (snip-jobs drain), nil when it is not drained.
	Drained *controls.Drain `json:"drained,omitempty"`
}

// RunRecord is one run of a job, as logged in job_runs.
type RunRecord struct {
	ID       int64     `json:"id,omitempty"`
	Instance string    `json:"instance"`
	Token    int64     `json:"token"`
	Slot     time.Time `json:"slot,omitzero"`
	// Trigger is what started the run: "schedule", "catch-up" (a cron slot
	// run late by the catch-up sweep) or "manual" (an operator's request).
	Trigger  string    `json:"trigger,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Result   string    `json:"result,omitempty"` // "" while running
	Error    string    `json:"error,omitempty"`
	// PID is the process the run started (an exec job's program), 0 for
	// none.
	PID int `json:"pid,omitempty"`
}

// SlotRecord is a cron slot as recorded in cron_slots.
type SlotRecord struct {
	Slot     time.Time `json:"slot"`
	State    string    `json:"state"`
	Token    int64     `json:"token"`
	Instance string    `json:"instance"`
	Attempts int       `json:"attempts"`
	Finished time.Time `json:"finished,omitzero"`
	Error    string    `json:"error,omitempty"`
}

// TermRecord is one term as recorded in job_terms (database clock). Ended is
// zero while the term runs; a term its instance left open (it died, froze or
// was cut off) is closed by its successor at its start, or by the reclaim of
// its dead process. History never ends a term its instance handed over after
// its successor's start.
type TermRecord struct {
	Job      string    `json:"job"`
	Token    int64     `json:"token"`
	Instance string    `json:"instance"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitzero"`
	Reason   string    `json:"reason,omitempty"`
	// EndedBy is who recorded the end: Instance itself, the instance whose
	// term replaced it, or "reclaim".
	EndedBy string `json:"ended_by,omitempty"`
	// Noticed is when Instance itself recorded the end, if later than
	// Ended: it was paused or cut off, and noticed late.
	Noticed time.Time `json:"noticed,omitzero"`
}

// Rejection is a fenced write refused because a newer term had written.
type Rejection struct {
	Resource string    `json:"resource"`
	Token    int64     `json:"token"`
	Current  int64     `json:"current"`
	Instance string    `json:"instance"`
	At       time.Time `json:"at"`
}

// Why a term ended, as the scheduler records it (job_terms.reason) besides
// leadership's reasons (expired, lease-lost, key-lost, resigned, shutdown).
const (
	EndShutdown      = "shutdown"
	EndWatchdog      = "watchdog"
	EndResignRequest = "resign-request"
	EndRebalance     = "rebalance"
	EndPanic         = "panic"
	EndFenced        = "fenced"
	EndResigned      = "resigned"
	EndPaused        = "paused"  // the job was paused (snip-jobs pause)
	EndDrained       = "drained" // its instance was drained (snip-jobs drain)
	// EndSuperseded: a newer term of the job was recorded before this one's
	// start could be: it ended while its process was paused or cut off.
	EndSuperseded = "superseded"
	// EndReclaimed: its process died and its host's supervisor reclaimed
	// its lease (snip-jobs reclaim), recorded by the reclaim.
	EndReclaimed = "reclaimed"
	// EndExpired is what the successor records for a term its instance
	// left open: its lease ended without a hand-over (the instance died,
	// froze or was cut off). The instance's own record of a hand-over, if
	// it comes, replaces it.
	EndExpired = "expired"
)

// HandOverReasons are the end reasons of terms their instance resigned while
// they still held: the job had stopped before the resignation, and the end
// was recorded after it (see History).
var HandOverReasons = []string{EndShutdown, EndWatchdog, EndResignRequest, EndRebalance, EndPanic, EndResigned, EndPaused, EndDrained}

// Describe says a job: its name, type, mode and schedule, without its state.
func Describe(spec configs.Job) Job {
	return Job{Name: spec.Name, Type: spec.Type, Singleton: spec.Singleton, Mode: spec.Mode().String(), Schedule: describeSchedule(spec.Schedule)}
}

func describeSchedule(sch configs.Schedule) string {
	switch sch.Kind {
	case configs.Continuous:
		return "continuous"
	case configs.Interval:
		if sch.Jitter > 0 {
			return fmt.Sprintf("every %v (+ up to %v)", sch.Every, sch.Jitter)
		}
		return fmt.Sprintf("every %v", sch.Every)
	case configs.Cron:
		return fmt.Sprintf("cron %q %s", sch.Cron, sch.Location)
	}
	return "?"
}
