package execjob_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/execjob"
	"github.com/snip/snip-jobs/jobs/execjob/supervisor"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/scheduler/controls"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/exectest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

func TestMain(m *testing.M) {
	// The runs' supervisors are this test binary, re-executed.
	if len(os.Args) > 1 && os.Args[1] == supervisor.Arg {
		os.Exit(supervisor.Main())
	}
	os.Exit(benchtest.RunMain(m))
}

// script writes an executable shell script into dir and returns its path.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func execJob(t testing.TB, name string, sch configs.Schedule, o execjob.Options) configs.Job {
	return configs.Job{Name: name, Type: "exec", Singleton: true, Grace: 10 * time.Second, Schedule: sch,
		Options: jobtest.Options(t, o)}
}

// lines reads a file of lines ("" when it does not exist yet).
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// A singleton's program runs on its leader with the contract's variables
// (its token the term's, its resource, its run id as history records it)
// and nothing of the service's environment, nor its secret files (it reads
// the files beside them); exit 0 is an ok run, and its pid is recorded
// while it runs. On both backends.
func TestAProgramRunsOnTheLeaderWithItsContractAndNotTheServicesEnvironment(t *testing.T) {
	t.Parallel()
	jobtest.EachBackend(t, func(t *testing.T, b jobtest.Backend) {
		c := jobtest.NewClusterOn(t, b)
		dir := t.TempDir()
		prog := script(t, dir, "report.sh", `env > "$1/env-$SNIP_JOBS_RUN_ID"
for f in "$2" "$3"; do cat "$f" >> "$1/read-$SNIP_JOBS_RUN_ID" || echo "refused $f" >> "$1/read-$SNIP_JOBS_RUN_ID"; done
`)
		secrets := t.TempDir()
		url := filepath.Join(secrets, "database-url")
		beside := filepath.Join(secrets, "README")
		for p, text := range map[string]string{url: "postgres://snip:hunter2@db/snip\n", beside: "not a secret\n"} {
			if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		namesURLFile := func(f *configs.File, _ *leadership.Config) { f.Postgres.URLFile = url }
		job := execJob(t, "report", configs.Schedule{Kind: configs.Interval, Every: time.Hour},
			execjob.Options{Command: []string{prog, dir, url, beside}, Env: map[string]string{"REPORT_TARGET": "s3://reports"}, Dir: "/", KillGrace: time.Second})
		reg := jobtest.Registry(t, execjob.Type())
		nodes := []*jobtest.Node{c.Start("server-1", reg, []configs.Job{job}, namesURLFile), c.Start("server-2", reg, []configs.Job{job}, namesURLFile)}
		var run status.RunRecord
		c.WaitNodes("the program's run recorded ok", nodes, func() bool {
			runs, _, err := status.Runs(context.Background(), c.DB, "report", 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) == 1 && runs[0].Result == "ok" {
				run = runs[0]
				return true
			}
			return false
		})
		leader, _ := c.Leader("report")
		env := map[string]string{}
		for _, kv := range lines(t, filepath.Join(dir, "env-"+strconv.FormatInt(run.ID, 10))) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		want := map[string]string{"SNIP_JOBS_JOB": "report", "SNIP_JOBS_INSTANCE": leader.Instance, "SNIP_JOBS_TOKEN": strconv.FormatInt(leader.Token, 10),
			"SNIP_JOBS_RESOURCE": "report", "SNIP_JOBS_RUN_ID": strconv.FormatInt(run.ID, 10), "SNIP_JOBS_TRIGGER": "schedule",
			"REPORT_TARGET": "s3://reports"}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("the program's %s = %q, want %q", k, env[k], v)
			}
		}
		if _, err := time.Parse(time.RFC3339Nano, env["SNIP_JOBS_DEADLINE"]); err != nil {
			t.Errorf("SNIP_JOBS_DEADLINE %q: %v", env["SNIP_JOBS_DEADLINE"], err)
		}
		for k := range env {
			if !strings.HasPrefix(k, "SNIP_JOBS_") && !map[string]bool{"PATH": true, "LANG": true, "LC_ALL": true, "TZ": true,
				"REPORT_TARGET": true, "PWD": true, "SHLVL": true, "_": true}[k] {
				t.Errorf("the program's environment has %s, which is not the contract's nor its own", k)
			}
		}
		read := lines(t, filepath.Join(dir, "read-"+strconv.FormatInt(run.ID, 10)))
		if want := []string{"refused " + url, "not a secret"}; !slices.Equal(read, want) {
			t.Errorf("the program read %q, want %q: the file postgres.url_file names is the service's secret", read, want)
		}
		if run.Instance != leader.Instance || run.Token != leader.Token || run.PID == 0 {
			t.Errorf("the run %+v; want it on the leader %s with token %d, its pid recorded", run, leader.Instance, leader.Token)
		}
	})
}

// No process of a program outlives its term: the leader resigns (as an
// operator's resign, a pause or a drain end a term), its program's whole
// tree — the setsid child and the double-forked daemon, all deaf to SIGTERM
// — is SIGKILLed after kill_grace and proven gone before the successor's
// program starts, which finds none of them alive. On both backends.
func TestNoProcessOfAProgramOutlivesItsTerm(t *testing.T) {
	t.Parallel()
	jobtest.EachBackend(t, func(t *testing.T, b jobtest.Backend) {
		c := jobtest.NewClusterOn(t, b)
		dir := t.TempDir()
		job := execJob(t, "watcher", configs.Schedule{Kind: configs.Continuous},
			execjob.Options{Command: exectest.Watcher(t, dir), Dir: "/", KillGrace: 500 * time.Millisecond})
		reg := jobtest.Registry(t, execjob.Type())
		nodes := []*jobtest.Node{c.Start("server-1", reg, []configs.Job{job}), c.Start("server-2", reg, []configs.Job{job})}
		c.WaitNodes("the first program started", nodes, func() bool { return len(exectest.Starts(t, dir)) == 1 })
		first, _ := c.Leader("watcher")
		ctx, cancel := context.WithTimeout(context.Background(), jobtest.Patience)
		defer cancel()
		if _, _, err := leadership.Resign(ctx, c.Leadership, "watcher"); err != nil {
			t.Fatal(err)
		}
		c.WaitNodes("the successor's program started", nodes, func() bool {
			s := exectest.Starts(t, dir)
			return len(s) >= 2 && s[len(s)-1].Token != strconv.FormatInt(first.Token, 10)
		})
		if o, err := exectest.Overlaps(dir); err != nil || len(o) > 0 {
			t.Errorf("processes of the resigned term's program were alive when the successor's started: %q (%v)", o, err)
		}
		var killed float64
		for _, n := range nodes {
			killed += n.MetricSum(t, "snip_jobs_exec_killed_processes_total")
		}
		if killed < 3 {
			t.Errorf("%v processes killed by the supervisors, want at least the 3 of the resigned tree", killed)
		}
	})
}

// A run's outcome is recorded as history shows it: a program that exits 3
// fails the run with its exit status and its last lines of output (a secret
// among them redacted); one that runs past its timeout is stopped — its
// whole tree — and recorded timed out; an operator's manual run (snip-jobs
// run JOB) runs it once more, recorded manual.
func TestAProgramsFailureTimeoutAndManualRunAreRecorded(t *testing.T) {
	t.Parallel()
	c := jobtest.NewCluster(t)
	dir := t.TempDir()
	failing := script(t, dir, "failing.sh", `echo "starting the export"
echo "connecting with password=hunter2-long-secret"
echo "the export failed" >&2
exit 3
`)
	slow := script(t, dir, "slow.sh", `setsid sleep 1000 & echo $! > "$1/slow-child"
sleep 1000
`)
	reg := jobtest.Registry(t, execjob.Type())
	timeout := 2 * time.Second
	jobs := []configs.Job{
		execJob(t, "failing", configs.Schedule{Kind: configs.Interval, Every: time.Hour},
			execjob.Options{Command: []string{failing}, Dir: "/", KillGrace: time.Second}),
		execJob(t, "slow", configs.Schedule{Kind: configs.Interval, Every: time.Hour},
			execjob.Options{Command: []string{slow, dir}, Dir: "/", KillGrace: 500 * time.Millisecond, Timeout: &timeout}),
	}
	node := c.Start("server-1", reg, jobs)
	last := func(job string) *status.RunRecord {
		runs, _, err := status.Runs(context.Background(), c.DB, job, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) == 0 || runs[0].Result == "" {
			return nil
		}
		return &runs[0]
	}
	c.WaitNodes("both runs recorded over", []*jobtest.Node{node}, func() bool { return last("failing") != nil && last("slow") != nil })
	f := last("failing")
	if f.Result != "error" || !strings.Contains(f.Error, "exit status 3; last output: ") ||
		!strings.Contains(f.Error, "the export failed") || !strings.Contains(f.Error, "starting the export") || strings.Contains(f.Error, "hunter2") {
		t.Errorf("the failing run: %q: %q; want error, its exit status and last lines, the secret redacted", f.Result, f.Error)
	}
	s := last("slow")
	if s.Result != "timed out" || !strings.Contains(s.Error, "timed out after 2s") {
		t.Errorf("the slow run: %q: %q; want timed out", s.Result, s.Error)
	}
	child := strings.TrimSpace(strings.Join(lines(t, filepath.Join(dir, "slow-child")), ""))
	if _, err := os.Stat("/proc/" + child); err == nil {
		t.Errorf("the timed-out program's setsid child (pid %s) is alive", child)
	}

	m, _, err := controls.RequestRun(context.Background(), c.DB, jobs[0], "alice@web1")
	if err != nil {
		t.Fatal(err)
	}
	var r controls.ManualRun
	var l *status.RunRecord
	// The request's outcome and its run's end are two records, in no set order.
	c.WaitCommit("the manual run over, and its run recorded", []string{"manual_runs", "job_runs"}, func() bool {
		r, err = controls.ReadRun(context.Background(), c.DB, m.ID)
		l = last("failing")
		return err == nil && r.Closed() && l != nil && l.ID == r.RunID
	})
	if r.State != controls.StateFailed || r.Result != "error" || !strings.Contains(r.Error, "exit status 3") {
		t.Errorf("the manual run of the failing program: %+v; want failed, error, its exit status", r)
	}
	if l.Trigger != "manual" {
		t.Errorf("the newest run of the failing job %+v; want the manual run's (%d)", l, r.RunID)
	}
}

// A program runs in every mode: on every instance (a job that runs
// everywhere: token 0, no deadline) and, in database mode, once per cron
// slot on the instance whose claim wins (the claim's token, the slot's
// resource and a deadline: its claim's).
func TestAProgramRunsEverywhereAndOncePerSlotInDatabaseMode(t *testing.T) {
	t.Parallel()
	c := jobtest.NewCluster(t)
	dir := t.TempDir()
	prog := script(t, dir, "record.sh", `echo "$SNIP_JOBS_JOB $SNIP_JOBS_INSTANCE $SNIP_JOBS_TOKEN $SNIP_JOBS_RESOURCE ${SNIP_JOBS_SLOT:--} ${SNIP_JOBS_DEADLINE:--}" >> "$1/runs"`+"\n")
	o := execjob.Options{Command: []string{prog, dir}, Dir: "/", KillGrace: time.Second}
	everywhere := execJob(t, "warm-cache", configs.Schedule{Kind: configs.Interval, Every: time.Hour}, o)
	everywhere.Singleton = false
	perSlot := jobtest.CronJob("sitemap", "exec", time.Second, time.UTC, configs.Database, configs.None)
	perSlot.Options = jobtest.Options(t, o)
	reg := jobtest.Registry(t, execjob.Type())
	var nodes []*jobtest.Node
	for _, name := range []string{"server-1", "server-2"} {
		nodes = append(nodes, c.Start(name, reg, []configs.Job{everywhere, perSlot}))
	}
	runs := func() (warm map[string]int, slots map[string]int) {
		warm, slots = map[string]int{}, map[string]int{}
		for _, l := range lines(t, filepath.Join(dir, "runs")) {
			f := strings.Fields(l)
			switch {
			case len(f) != 6:
			case f[0] == "warm-cache" && f[2] == "0" && f[3] == "warm-cache" && f[4] == "-" && f[5] == "-":
				warm[f[1]]++
			case f[0] == "sitemap" && f[2] != "0" && f[3] == "sitemap@"+f[4] && f[5] != "-":
				slots[f[4]]++
			default:
				t.Errorf("a run with an unexpected contract: %q", l)
			}
		}
		return warm, slots
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the runs:\n%s", strings.Join(lines(t, filepath.Join(dir, "runs")), "\n"))
		}
	})
	c.WaitNodes("every instance warmed, and three slots run", nodes, func() bool {
		warm, slots := runs()
		return warm["server-1"] == 1 && warm["server-2"] == 1 && len(slots) >= 3
	})
	for slot, n := range func() map[string]int { _, s := runs(); return s }() {
		if n != 1 {
			t.Errorf("slot %s ran %d times, want once", slot, n)
		}
	}
}
