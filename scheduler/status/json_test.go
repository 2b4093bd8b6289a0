package status_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/scheduler/status"
)

// keys are the JSON keys v encodes to, sorted.
func keys(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// The one model's JSON is what `snip-jobs status --json`, the page's
// /status/cluster.json and an instance's /status show. Each kept every key
// it had before the three views shared it; what changed:
//   - a job of the CLI and the page gained leading, token and since (the
//     leader's), as the scheduler's ClusterStatus already filled them; a job
//     of /status gained leader and last_slot (null there), and shows
//     last_run as null before the first run instead of leaving it out;
//   - an instance of the CLI gained up and leads; one of the page gained
//     lease and lease_granted_seconds;
//   - the page's lease time left (of a leader, of an instance), once
//     lease_left_seconds, is lease_ttl_seconds, as the CLI always named it;
//   - the CLI's output gained leaders_known;
//   - a run gained trigger (job_runs.trigger, migration 0013);
//   - the cluster gained drained (the drained instances, [] when none), an
//     instance drained when it is, a job paused and manual_run when it has
//     them (the operators' controls, migration 0014).
func TestTheJSONOfTheStatusModel(t *testing.T) {
	at := time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	run := &status.RunRecord{ID: 1, Instance: "server-1", Token: 7, Slot: at, Trigger: "catch-up", Started: at, Finished: at, Result: "error", Error: "boom"}
	slot := &status.SlotRecord{Slot: at, State: "done", Token: 7, Instance: "server-1", Attempts: 1, Finished: at, Error: "x"}
	leader := &status.Leader{Instance: "server-1", Host: "h", PID: 1, Token: 7, Since: at, Lease: "1f", LeaseTTLSeconds: 9}
	full := status.Job{Name: "pulse", Type: "sql", Singleton: true, Mode: configs.ModeLeader.String(), Schedule: "every 1s",
		Leading: true, Token: 7, Since: at, Headroom: time.Second, Leader: leader, LastRun: run, LastSlot: slot}
	inst := status.Instance{Name: "server-1", Up: true, Host: "h", PID: 1, Started: at, Lease: "1f", LeaseTTLSeconds: 9, LeaseGrantedSeconds: 10, Leads: 1}
	for _, tc := range []struct {
		what string
		v    any
		want string
	}{
		{"a job, every part known", full, "headroom_ns job last_run last_slot leader leading mode schedule since singleton token type"},
		{"a job nobody leads, never run", status.Job{Name: "prune", Mode: configs.ModeEverywhere.String()},
			"job last_run last_slot leader leading mode schedule singleton type"},
		{"a leader", leader, "host instance lease lease_ttl_seconds pid since token"},
		{"an instance up", inst, "host instance leads lease lease_granted_seconds lease_ttl_seconds pid started up"},
		{"an instance known only by name", status.Instance{Name: "server-2"}, "instance leads lease_granted_seconds lease_ttl_seconds up"},
		{"a run", run, "error finished id instance result slot started token trigger"},
		{"a slot", slot, "attempts error finished instance slot state token"},
		{"the cluster", status.Cluster{Errors: []string{"x"}}, "drained errors instances jobs leaders_known"},
		{"a paused job with a manual run pending", status.Job{Name: "report", Mode: configs.ModeLeader.String(),
			Paused:    &controls.Pause{Job: "report", By: "alice@web1", Since: at, Reason: "mail server moves"},
			ManualRun: &controls.Request{ID: 3, Job: "report", Mode: "leader", RequestedBy: "bob@web2", RequestedAt: at, State: "pending"}},
			"job last_run last_slot leader leading manual_run mode paused schedule singleton type"},
		{"a pause", controls.Pause{Job: "report", By: "alice@web1", Since: at}, "by job since"},
		{"a drained instance", status.Instance{Name: "server-2", Drained: &controls.Drain{Instance: "server-2", By: "alice@web1", Since: at, Reason: "reboot"}},
			"drained instance leads lease_granted_seconds lease_ttl_seconds up"},
		{"a drain", controls.Drain{Instance: "server-2", By: "alice@web1", Since: at, Reason: "reboot"}, "by instance reason since"},
	} {
		if got := keys(t, tc.v); got != tc.want {
			t.Errorf("%s: keys %q, want %q", tc.what, got, tc.want)
		}
	}
}
