package main

import (
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/scheduler/status"
)

// On Kubernetes the table says when each instance Lease was last renewed
// instead of etcd's lease time left, and lists the instances not counted up
// (a held Lease not renewed within its duration, or leaving) apart; the
// leader's LEASE LEFT column says when its instance Lease was renewed.
func TestTheStatusTableOnKubernetesShowsRenewalsAndListsStaleInstancesApart(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	st := status.Cluster{Backend: "kubernetes", LeadersKnown: true,
		Instances: []status.Instance{
			{Name: "server-a", Up: true, Host: "web1", PID: 7, Started: now.Add(-time.Hour), LeaseGrantedSeconds: 10,
				Holder: "server-a/1", Renewed: now.Add(-2 * time.Second), Leads: 1},
			{Name: "server-b", Host: "web2", PID: 8, Started: now.Add(-time.Hour), LeaseGrantedSeconds: 10,
				Holder: "server-b/1", Renewed: now.Add(-time.Minute)},
		},
		Jobs: []status.Job{{Name: "pulse", Mode: "leader", Leader: &status.Leader{Instance: "server-a", Token: 3, Since: now.Add(-time.Minute),
			Holder: "server-a/1", Renewed: now.Add(-2 * time.Second)}}},
	}
	var b strings.Builder
	printStatus(&b, st, now)
	out := b.String()
	for _, want := range []string{
		"instances up: server-a (host web1, pid 7, up 1h0m, renewed 2s ago, of 10s)\n",
		"instances not up (leaving, or instance Lease not renewed within its duration: gone, or clocks apart): server-b (host web2, pid 8, up 1h0m, renewed 1m0s ago, of 10s)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	if lines := linesWith(out, "pulse", "server-a", "3", "1m0s ago", "renewed 2s ago"); len(lines) != 1 {
		t.Errorf("the job's line:\n%s", out)
	}
}
