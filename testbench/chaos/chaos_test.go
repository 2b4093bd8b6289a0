package chaos_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/chaos"
)

// TestMain lets the harness run this test binary again as an etcd member
// process (chaos.MemberCommand), as testbench/cmd/snip-chaos does; the checker's own
// tests use the shared PostgreSQL of benchtest.
//
// The runs are clusters of processes that mostly wait (for leases to expire,
// members to elect, faults to heal): about one core between all of them. They
// run at once, not GOMAXPROCS at a time, unless -parallel says otherwise.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == chaos.MemberCommand {
		os.Exit(chaos.MemberMain(os.Args[2:]))
	}
	benchtest.MostlyWaiting(runs)
	os.Exit(benchtest.RunMain(m))
}

// buildOnce builds the one snip-jobs binary the runs share (snipJobs).
var buildOnce = sync.OnceValues(func() (string, error) {
	return chaos.BuildSnipJobs(context.Background())
})

// snipJobs is this module's snip-jobs, built once for every run of the
// package (a link of the binary costs seconds of a core each time).
func snipJobs(t *testing.T) string {
	t.Helper()
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runs is how many clusters this package's tests start.
const runs = 9

// Three snip-jobs processes on a three-member etcd cluster (each member its
// own process) and one PostgreSQL, with clicks and custom domains flowing in,
// go through one fault of every kind, in random order: leader SIGKILLed and
// restarted, SIGSTOPped past its TTL, cut off from etcd (once with a slow
// database link), SIGTERMed and restarted; an etcd member, the etcd leader,
// and two members (no quorum) lost and restarted; PostgreSQL restarted; a job
// paused and resumed, manual runs asked for at once, an instance drained and
// undrained, by the operators' commands. What the resources accepted must
// satisfy every invariant of the checker, and the cluster must recover after
// each fault. The kinds are split between two clusters that run at once (the
// leaders' faults and a drain; etcd's, PostgreSQL's and the other controls),
// so that the package is not the suite's longest by half.
func TestEveryFaultKindOnceLeavesEveryInvariantIntact(t *testing.T) {
	t.Parallel()
	halves := [][]chaos.Kind{
		{chaos.KillLeader, chaos.KillLeaderReclaim, chaos.PauseLeader, chaos.PartitionLeader, chaos.PartitionSlowDB, chaos.TermLeader, chaos.Drain},
		{chaos.EtcdMemberLoss, chaos.EtcdLeaderLoss, chaos.QuorumLoss, chaos.FollowersLoss, chaos.PostgresRestart, chaos.OperatorPause, chaos.ManualRun},
	}
	if n := len(halves[0]) + len(halves[1]); n != len(chaos.AllKinds) {
		t.Fatalf("the halves hold %d kinds; AllKinds has %d: put the new kind in one", n, len(chaos.AllKinds))
	}
	reps := make([]*chaos.Report, len(halves))
	var wg sync.WaitGroup
	for i, kinds := range halves {
		wg.Go(func() {
			rep, err := chaos.Run(context.Background(), chaos.Options{
				Faults:      len(kinds),
				Kinds:       kinds,
				AwaitReport: true, // the report's check must have one to check
				Binary:      snipJobs(t),
				Log:         benchtest.Logger(t),
			})
			if err != nil {
				t.Errorf("run %d could not be done: %v", i+1, err)
				return
			}
			t.Logf("report of run %d:\n%s", i+1, rep.Markdown())
			checkRun(t, rep)
			reps[i] = rep
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	kinds := map[chaos.Kind]bool{}
	var controls chaos.ControlStats
	for _, rep := range reps {
		for _, f := range rep.Faults {
			kinds[f.Kind] = true
		}
		if c := rep.Controls; c != nil {
			controls.Pauses += c.Pauses
			controls.Drains += c.Drains
			controls.Done += c.Done
			controls.Executed += c.ManualChecked()
		}
	}
	for _, k := range chaos.AllKinds {
		if !kinds[k] {
			t.Errorf("no %s fault was injected", k)
		}
	}
	if controls.Pauses == 0 || controls.Drains == 0 || controls.Done == 0 || controls.Executed == 0 {
		t.Errorf("the operators' controls were not all checked: %+v", controls)
	}
}

// The same on the Kubernetes backend: the three instances keep their terms
// in Leases on a real kube-apiserver, each reaching it through a fault proxy
// of its own, the API server stores them in the harness's three etcd
// members, and the observer watches the job Leases. Every kind of that
// backend once, in one cluster: the leaders' faults; beneath the API server
// an etcd member, the etcd leader, two members (no quorum) and both
// followers lost and restarted; the kube-apiserver SIGKILLed and started
// again; PostgreSQL restarted; and the operators' controls. The same checker
// must find nothing, and the quorum's check must have had each job's token
// before the losses to check the terms against.
func TestEveryKubeFaultKindOnceLeavesEveryInvariantIntact(t *testing.T) {
	t.Parallel()
	rep, err := chaos.Run(context.Background(), chaos.Options{
		Backend:     chaos.BackendKubernetes,
		Faults:      len(chaos.KubeKinds),
		AwaitReport: true,
		Binary:      snipJobs(t),
		Log:         benchtest.Logger(t),
	})
	if err != nil {
		t.Fatalf("the run could not be done: %v", err)
	}
	t.Logf("report:\n%s", rep.Markdown())
	checkRun(t, rep)
	kinds := map[chaos.Kind]bool{}
	for _, f := range rep.Faults {
		kinds[f.Kind] = true
	}
	for _, k := range chaos.KubeKinds {
		if !kinds[k] {
			t.Errorf("no %s fault was injected", k)
		}
	}
	for _, f := range rep.Faults {
		if (f.Kind == chaos.QuorumLoss || f.Kind == chaos.FollowersLoss) && f.PreLossTokens[chaos.JobProbe] == 0 {
			t.Errorf("fault %d (%s): no probe token recorded before the loss (%v): the quorum's check had nothing to check", f.N, f.Kind, f.PreLossTokens)
		}
	}
	if c := rep.Controls; c == nil || c.Pauses == 0 || c.Drains == 0 || c.Done == 0 || c.ManualChecked() == 0 {
		t.Errorf("the operators' controls were not all checked: %+v", c)
	}
}

// checkRun asserts what every fault run must show: no violation, each job's
// checks with something to check, higher tokens after every takeover, no
// overrun.
func checkRun(t *testing.T, rep *chaos.Report) {
	t.Helper()
	for _, v := range rep.Violations {
		t.Errorf("%s: %s", v.Invariant, v.Detail)
	}
	if rep.Probe.Writes == 0 || rep.Probe.Terms < 2 {
		t.Errorf("the probe saw %d writes from %d terms: the run did not exercise leadership", rep.Probe.Writes, rep.Probe.Terms)
	}
	// Each check had something to check.
	want := []string{chaos.JobProbe, chaos.JobReport, chaos.JobCerts, chaos.JobAggregator, chaos.JobScript}
	if rep.Upgrade != nil {
		want = want[:4] // the previous release has no exec type
	}
	if !slices.Equal(rep.Jobs, want) {
		t.Errorf("the run's jobs are %v, want %v", rep.Jobs, want)
	}
	logged := map[string]int{}
	for _, w := range rep.Writes {
		logged[w.Job] = w.Writes
	}
	for _, job := range want[1:] {
		if logged[job] == 0 {
			t.Errorf("no write of %s was logged: its token order was not checked", job)
		}
	}
	if rep.Counts == nil {
		t.Errorf("the click counts were not checked")
	} else if rep.Counts.Valid == 0 || rep.Counts.Invalid == 0 {
		t.Errorf("the counts were checked against %d valid and %d invalid events: the load did not run", rep.Counts.Valid, rep.Counts.Invalid)
	}
	if rep.Reports.Reports == 0 {
		t.Errorf("no weekly report was stored (%d slots done, %d skipped, %d open)", rep.Reports.SlotsDone, rep.Reports.SlotsSkipped, rep.Reports.SlotsOpen)
	}
	if rep.Certs.Stored == 0 {
		t.Errorf("no certificate was stored (the CA issued %d)", rep.Certs.Issued)
	}
	for _, f := range rep.Faults {
		for _, tk := range f.Takeovers {
			if tk.To <= tk.From {
				t.Errorf("fault %d (%s): %s went from token %d to %d", f.N, f.Kind, tk.Job, tk.From, tk.To)
			}
		}
	}
	// Every job returns once its term has ended, within its grace: an overrun
	// holds that job's next campaign on its instance, and a SIGTERM hand-over.
	for job, n := range rep.Overruns {
		t.Errorf("%s ran past its grace %d time(s) after its term ended (see %q in the instance logs)", job, n, scheduler.MsgOverrun)
	}
	if len(rep.Overruns) > 0 {
		t.Logf("what the overrun runs' stops waited on:\n%s", strings.Join(rep.OverrunLog, "\n"))
	}
}

// The same harness on a deliberately broken snip-jobs (go build -overlay with
// broken.go's patches: stop-early margin zero, fence check disabled) must report
// violations: a leader cut off from its store while its database link is slow has
// a write, sent while its term looked valid, accepted after its successor's.
// On both backends, at once: etcd's members, and Leases on a kube-apiserver.
func TestTheCheckerCatchesABrokenBuild(t *testing.T) {
	t.Parallel()
	for _, b := range chaos.Backends {
		t.Run(string(b), func(t *testing.T) {
			t.Parallel()
			counts, faults := runBroken(t, chaos.Options{Backend: b, Faults: 12, Kinds: []chaos.Kind{chaos.PartitionSlowDB}, Broken: true, StopAtViolation: true})
			if counts[chaos.InvTokenOrder] == 0 {
				t.Errorf("no probe write accepted out of token order was reported after %d faults on the broken build", faults)
			}
			if counts[chaos.InvFenceTable] == 0 {
				t.Errorf("the broken build writes no fencing_tokens rows, and the checker did not say so")
			}
		})
	}
}

// The same harness on a snip-jobs whose weekly report leaves an operator's
// manual run to be completed by the scheduler after the run, in a
// transaction of its own (broken.go's brokenManualPatches: at least once, as
// the sql job's, the weekly report's and the renewer's runs were before
// they completed their request with their effect) must report the request
// run twice: its claimer struck (SIGSTOP past its TTL, or SIGKILL) once its
// run's end is recorded, before that completion, leaves the request to its
// successor, which runs it again.
func TestTheCheckerCatchesAManualRunOfTheWeeklyReportRunTwice(t *testing.T) {
	t.Parallel()
	counts, faults := runBroken(t, chaos.Options{
		Faults:            3, // the first may find the report's leader handing over, and miss
		Kinds:             []chaos.Kind{chaos.ManualRun},
		ManualJobs:        []string{chaos.JobReport},
		ManualAfterEffect: true,
		BrokenManual:      true,
	})
	if counts[chaos.InvManualEffect] == 0 {
		t.Errorf("no manual run of the weekly report taking effect twice was reported after %d faults on the broken manual build", faults)
	}
}

// runBroken runs o (a broken build) and returns its violations by invariant
// and how many faults it injected.
func runBroken(t *testing.T, o chaos.Options) (map[string]int, int) {
	t.Helper()
	o.Log = benchtest.Logger(t)
	rep, err := chaos.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("the run could not be done: %v", err)
	}
	t.Logf("report:\n%s", rep.Markdown())
	return rep.ViolationCounts(), len(rep.Faults)
}
