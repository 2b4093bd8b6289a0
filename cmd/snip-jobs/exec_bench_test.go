package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/testbench/exectest"
	"github.com/snip/snip-jobs/testbench/percentile"
	"github.com/snip/snip-jobs/testbench/releases"
)

// freeze is how long a round freezes the holder: twice the TTL (2 s).
const freeze = 4 * time.Second

// BenchmarkAFrozenHoldersProgram freezes (SIGSTOP, twice the 2 s TTL) the
// process holding a singleton while its program runs, once per round, for
// snip-jobs (the exec job: two instances on an etcd member) and for etcd's
// own `etcdctl lock --ttl 2 NAME -- CMD` (two of them on the same member) in
// the same run, alternating; the program is the test bench's watcher
// (package exectest), which records, as it starts, any process of an
// earlier run still alive. It reports the rounds in which the successor's
// program started beside the frozen holder's (overlaps) and how many of the
// frozen holder's processes were still alive a second after the successor's
// started (the frozen holder's tree still running beside its successor's).
// Run with -benchtime=20x.
func BenchmarkAFrozenHoldersProgram(b *testing.B) {
	etcdctl, err := releases.Etcdctl(context.Background(), "3.7.0")
	if err != nil {
		b.Fatal(err)
	}
	snipDir, lockDir := b.TempDir(), b.TempDir()
	ec := startEtcdExecCluster(b, watcherJob(exectest.Watcher(b, snipDir)))
	lockCmd := exectest.Watcher(b, lockDir)
	var snipOverlaps, lockOverlaps, snipLeft, lockLeft int
	for range b.N {
		o, l := frozenSnipJobsRound(b, ec, snipDir)
		snipOverlaps, snipLeft = snipOverlaps+o, snipLeft+l
		o, l = frozenEtcdctlRound(b, etcdctl, ec.endpoint, lockCmd, lockDir)
		lockOverlaps, lockLeft = lockOverlaps+o, lockLeft+l
	}
	b.ReportMetric(float64(snipOverlaps), "snip-jobs-overlapping-rounds")
	b.ReportMetric(float64(snipLeft), "snip-jobs-frozen-holders-processes-alive-1s-after")
	b.ReportMetric(float64(lockOverlaps), "etcdctl-lock-overlapping-rounds")
	b.ReportMetric(float64(lockLeft), "etcdctl-lock-frozen-holders-processes-alive-1s-after")
}

// frozenSnipJobsRound freezes the snip-jobs process whose program runs,
// until the other instance's program started; it returns whether that start
// found the frozen one's processes alive (1 or 0) and how many of them are
// alive a second later.
func frozenSnipJobsRound(b *testing.B, ec execCluster, dir string) (overlaps, left int) {
	starts := exectest.Starts(b, dir)
	holder := starts[len(starts)-1]
	before := overlapCount(b, dir)
	victim := ec.procs[holder.Instance]
	victim.signal(syscall.SIGSTOP)
	eventually(b, "the other instance's program started", func() bool { return len(exectest.Starts(b, dir)) > len(starts) })
	time.Sleep(time.Second)
	left = len(aliveOf(b, dir, holder))
	victim.signal(syscall.SIGCONT)
	return min(1, overlapCount(b, dir)-before), left
}

// frozenEtcdctlRound runs two `etcdctl lock` of one lock, each running the
// watcher, freezes the one whose watcher runs for twice the TTL, and says as
// frozenSnipJobsRound does; then it ends both and their programs.
func frozenEtcdctlRound(b *testing.B, etcdctl, endpoint string, command []string, dir string) (overlaps, left int) {
	before, starts := overlapCount(b, dir), len(exectest.Starts(b, dir))
	holders := map[string]*exec.Cmd{}
	for _, name := range []string{"lock-a", "lock-b"} {
		cmd := exec.Command(etcdctl, append([]string{"--endpoints=" + endpoint, "lock", "--ttl=2", "snip-bench", "--"}, command...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "SNIP_JOBS_INSTANCE=" + name, "ETCDCTL_API=3"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		holders[name] = cmd
		b.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	}
	eventually(b, "etcdctl lock's first command started", func() bool { return len(exectest.Starts(b, dir)) > starts })
	s := exectest.Starts(b, dir)
	holder := s[len(s)-1]
	_ = syscall.Kill(holders[holder.Instance].Process.Pid, syscall.SIGSTOP)
	deadline := time.Now().Add(freeze)
	for time.Now().Before(deadline) && len(exectest.Starts(b, dir)) == starts+1 {
		time.Sleep(50 * time.Millisecond)
	}
	if len(exectest.Starts(b, dir)) > starts+1 {
		time.Sleep(time.Second)
		left = len(aliveOf(b, dir, holder))
	}
	_ = syscall.Kill(holders[holder.Instance].Process.Pid, syscall.SIGCONT)
	for _, cmd := range holders {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	killTrees(b, dir) // etcdctl lock stops neither its command nor what that started
	return min(1, overlapCount(b, dir)-before), left
}

func overlapCount(b *testing.B, dir string) int {
	o, err := exectest.Overlaps(dir)
	if err != nil {
		b.Fatal(err)
	}
	return len(o)
}

// aliveOf lists the live processes of the trees the watcher recorded in dir
// but the newest (the successor's, which runs as it should).
func aliveOf(b *testing.B, dir string, _ exectest.Start) []string {
	trees, err := filepath.Glob(filepath.Join(dir, "tree-*"))
	if err != nil {
		b.Fatal(err)
	}
	newest, at := "", time.Time{}
	for _, t := range trees {
		if fi, err := os.Stat(t); err == nil && fi.ModTime().After(at) {
			newest, at = t, fi.ModTime()
		}
	}
	// Set the newest aside while counting.
	aside := filepath.Join(dir, "aside-"+filepath.Base(newest)) // out of exectest's tree-* glob
	if err := os.Rename(newest, aside); err != nil {
		b.Fatal(err)
	}
	defer os.Rename(aside, newest)
	alive, err := exectest.Alive(dir)
	if err != nil {
		b.Fatal(err)
	}
	return alive
}

// killTrees ends every process the watcher recorded in dir.
func killTrees(b *testing.B, dir string) {
	alive, err := exectest.Alive(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range alive {
		if pid, err := strconv.Atoi(p); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	trees, _ := filepath.Glob(filepath.Join(dir, "tree-*"))
	for _, t := range trees {
		_ = os.Remove(t)
	}
}

// BenchmarkATermsProgramStartInTheService measures, in the service as it
// ships (two `snip-jobs run` processes on a real etcd member and PostgreSQL;
// the program the test bench's watcher), from a term's start to its
// program's exec: each read from its instance's own log, one process and one
// clock: the term's "term started" line and its run's "program started"
// line, logged once the supervisor reported the pid after the exec. Each
// round asks the holder to resign (as `snip-jobs resign` does, from this
// process: a CLI process starting beside each term took CPU from the
// processes measured), and the other instance's term begins. Each
// instance's first term is not counted (its spare supervisor may still be
// starting), and the logs are read as they grow, each line once: re-reading
// them whole every 20 ms took CPU too. Run with -benchtime=Nx: N terms.
func BenchmarkATermsProgramStartInTheService(b *testing.B) {
	dir := b.TempDir()
	ec := startEtcdExecCluster(b, watcherJob(exectest.Watcher(b, dir)))
	logs := &termLogs{ec: ec, read: map[string]int{}, starts: map[string]map[int64]time.Time{}}
	cluster := etcdlease.NewCluster(etcdClient(b, ec.endpoint), testPrefix)
	handOver := func() {
		n := logs.started()
		if _, _, err := leadership.Resign(context.Background(), cluster, "watcher"); err != nil {
			b.Fatalf("resign: %v", err)
		}
		eventually(b, "the next term's program started", func() bool { return logs.started() > n })
	}
	eventually(b, "the first program started", func() bool { return logs.started() > 0 })
	handOver() // the other instance's first term
	counted := logs.started()
	b.ResetTimer()
	for range b.N {
		handOver()
	}
	b.StopTimer()
	logs.started()
	percentile.Report(b, "term-start-to-exec-", logs.toExec[counted:])
}

// termLogs follows the watcher job's terms in the instances' logs: for each
// term whose program started, in order, the time from its "term started"
// line to its "program started" line.
type termLogs struct {
	ec     execCluster
	read   map[string]int // bytes of each instance's log read
	starts map[string]map[int64]time.Time
	toExec []time.Duration
}

// started reads what the logs gained and says how many programs started.
func (tl *termLogs) started() int {
	for name, in := range tl.ec.procs {
		text := tailOf(in.out, tl.read[name])
		whole := strings.LastIndexByte(text, '\n') + 1 // a line still being written waits
		if tl.starts[name] == nil {
			tl.starts[name] = map[int64]time.Time{}
		}
		for line := range strings.Lines(text[:whole]) {
			var l struct {
				Time  time.Time `json:"time"`
				Msg   string    `json:"msg"`
				Job   string    `json:"job"`
				Token int64     `json:"token"`
			}
			if json.Unmarshal([]byte(line), &l) != nil || l.Job != "watcher" {
				continue
			}
			switch l.Msg {
			case "term started":
				tl.starts[name][l.Token] = l.Time
			case "program started":
				if at, ok := tl.starts[name][l.Token]; ok {
					tl.toExec = append(tl.toExec, l.Time.Sub(at))
				}
			}
		}
		tl.read[name] += whole
	}
	return len(tl.toExec)
}

// tailOf is the file at path from byte off on ("" if it cannot be read).
func tailOf(path string, off int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, int64(off), 1<<40))
	return string(b)
}
