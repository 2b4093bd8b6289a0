package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/snip/snip-jobs/jobs/execjob/supervisor"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/testbench/exectest"
	"github.com/snip/snip-jobs/testbench/systemdtest"
)

// The unit test's exec singleton is the test bench's watcher (package
// exectest): each start records its process tree (itself, a setsid'd child
// and a double-forked daemon, all deaf to SIGTERM) and first checks that no
// process of an earlier run recorded in its folder is alive. In the
// container it is unitWatcher, keeping its records in unitRecords, the
// service's StateDirectory= (the one folder the unit's sandbox lets its user
// write that outlives a restart); on the host, a copy in a folder of the
// test's.
const (
	unitWatcher  = "/usr/local/lib/snip-test/watcher.sh"
	unitRecords  = "/var/lib/snip-jobs"
	treeRecorded = "tree recorded" // the watcher's first line of output
)

// watcherLoop follows the watcher's prelude: it says its tree is recorded,
// then idles until it is killed.
const watcherLoop = "echo '" + treeRecorded + "'\nwhile :; do sleep 1; done\n"

// freeze freezes the service (SIGSTOP of its main process) while it leads
// the exec watcher, and checks that the run's supervisor, which is not
// frozen with it, kills the program's whole tree at the term's deadline.
// systemd's service watchdogs are off meanwhile: the watchdog would restart
// the process at a moment of its own (it pings every half WatchdogSec, so
// that moment can come before the term's deadline), and its death ends the
// tree as well (the supervisor's control pipe closes), which would prove
// nothing about the deadline; the stall phase covers the watchdog. So only
// the supervisor can end the program here; were its deadline not kept, the
// tree would live on. By what processes, etcd and the records say, not by
// time:
//   - when the term's key is deleted (its lease expired: snip-jobs frozen,
//     nobody else ends it), every process recorded of the tree has exited
//     (pidfds), snip-jobs is still stopped, and the unit's control group
//     holds no process but snip-jobs, its supervisors and the everywhere
//     program;
//   - the host's program of the job, started in the next term, found none of
//     the unit's tree alive as it started (the watcher's own check, on the
//     tree translated to the host's pids);
//   - resumed (SIGCONT), snip-jobs logs the supervisor's account of the run:
//     it ended at the deadline;
//   - the service recovers by itself: the same main process, active, pinging
//     its watchdog, and leading a new term.
func (u *unit) freeze(observer *clientv3.Client, singletons []string, hostRecords string) {
	t := u.t
	t.Helper()
	first := u.lead(observer, singletons, "watcher")
	tree := u.watcherTree(first.Token, hostRecords)
	inner, pid := u.mainPID()
	mainFD := openPidfd(t, pid)
	restarts := u.show(unitName)["NRestarts"]
	terms := watchTerms(t, observer, first.Job)

	u.run("systemctl", "service-watchdogs", "no")
	mark := u.journal.len()
	u.run("systemctl", "kill", "--kill-whom=main", "--signal=SIGSTOP", unitName)
	eventually(t, "snip-jobs stopped", func() bool { return processState(pid) == "T" })

	terms.deleted(t)
	for _, p := range tree {
		if !pidfdExited(p.fd) {
			t.Errorf("when the frozen term's key was deleted (its lease expired), process %s (%s in the container) of its program's tree was alive",
				p.host.PID, p.inner)
		}
	}
	if pidfdExited(mainFD) || processState(pid) != "T" {
		t.Fatalf("snip-jobs (pid %d) was not stopped throughout: the tree's end proves nothing", inner)
	}
	u.onlyTheService(inner)

	next := terms.next(t, first.Token)
	if next.leader.Instance != hostInstance {
		t.Fatalf("the term after the frozen one is %+v; want %s's", next.leader, hostInstance)
	}
	successor := exectest.Start{Instance: hostInstance, Token: strconv.FormatInt(next.leader.Token, 10)}
	eventually(t, "the host's program of the next term started", func() bool {
		return slices.Contains(exectest.Starts(t, hostRecords), successor)
	})
	if o, err := exectest.Overlaps(hostRecords); err != nil || len(o) > 0 {
		t.Errorf("processes of an earlier run (the frozen unit's among them) were alive when the host's program started: %q (%v)", o, err)
	}
	if pidfdExited(mainFD) || processState(pid) != "T" {
		t.Fatalf("snip-jobs (pid %d) was not stopped throughout", inner)
	}

	pinged := u.show(unitName)["WatchdogTimestampMonotonic"]
	u.run("systemctl", "kill", "--kill-whom=main", "--signal=SIGCONT", unitName)
	ended, _ := u.journal.wait("the frozen run's end, once snip-jobs runs again", mark, runEnded(first.Job, tree[0].inner))
	if !strings.Contains(ended.Message, `"msg":"program killed by its supervisor at the term's deadline"`) &&
		!strings.Contains(ended.Message, `"ended":"deadline"`) {
		t.Errorf("the frozen run's end: %s; want its supervisor's account to say it killed the tree at the deadline", ended.Message)
	}
	// The watchdogs go back on once the process has pinged since it ran
	// again: before, its last ping could be older than WatchdogSec.
	eventually(t, "a watchdog ping of the resumed process", func() bool {
		return u.show(unitName)["WatchdogTimestampMonotonic"] != pinged
	})
	u.run("systemctl", "service-watchdogs", "yes")

	mine := settled(t, observer, singletons)
	if mine.Token <= next.leader.Token {
		t.Errorf("after SIGCONT the unit leads %s with token %d; want a term newer than the host's %d", mine.Job, mine.Token, next.leader.Token)
	}
	show := u.show(unitName)
	if again, _ := strconv.Atoi(show["MainPID"]); again != inner || show["NRestarts"] != restarts ||
		show["ActiveState"] != "active" || show["SubState"] != "running" {
		t.Errorf("after SIGCONT: %s %s, main pid %d → %d, restarts %s → %s; want the same process running, not restarted",
			show["ActiveState"], show["SubState"], inner, again, restarts, show["NRestarts"])
	}
	t.Logf("SIGSTOP of %s leading %s (token %d) → %s's term %d; after SIGCONT %s leads %s (token %d); the frozen run's end: %s",
		unitInstance, first.Job, first.Token, hostInstance, next.leader.Token, unitInstance, mine.Job, mine.Token, ended.Message)
}

// lead makes the unit lead job, the singletons settled. When the host leads
// it, the operator drains the host and undrains it (`snip-jobs drain
// --instance`, in the container): the unit takes every singleton, then the
// spread hands back the first of the config's it may, never the last, which
// the watcher is (a resign would not do: the host takes a resigned job back
// when the unit leads more than it, as the spread rule says).
func (u *unit) lead(observer *clientv3.Client, singletons []string, job string) etcdlease.Leader {
	t := u.t
	t.Helper()
	settled(t, observer, singletons)
	l := leaderOf(t, observer, job, 0)
	if l.Instance != unitInstance {
		t.Logf("%s leads %s: %s", hostInstance, job,
			strings.TrimSpace(u.run("snip-jobs", "drain", "--instance", hostInstance, "--reason", "the unit test moves "+job+" to "+unitInstance)))
		u.run("snip-jobs", "undrain", "--instance", hostInstance)
		settled(t, observer, singletons)
		l = leaderOf(t, observer, job, 0)
	}
	if l.Instance != unitInstance {
		t.Fatalf("%s is led by %s after a drain of it; want %s", job, l.Instance, unitInstance)
	}
	return l
}

// treeProc is a process of the unit's watcher's tree: its pid in the
// container, the host's view of it, and a pidfd of it.
type treeProc struct {
	inner string
	host  exectest.Proc
	fd    int
}

// watcherTree waits for the unit's watcher of the term token to say its
// tree is recorded, and returns the tree (the watcher first), each process
// translated to the host's pid and held by a pidfd. It adds the translated
// tree to the host's watcher's records, so that the host's next program
// checks it as it starts.
func (u *unit) watcherTree(token int64, hostRecords string) []treeProc {
	t := u.t
	t.Helper()
	said, _ := u.journal.wait("the unit's watcher recording its tree", 0,
		processSays("program output", `"job":"watcher"`, fmt.Sprintf(`"token":%d,`, token), `"line":"`+treeRecorded+`"`))
	var line struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(said.Message), &line); err != nil || line.PID == 0 {
		t.Fatalf("the watcher's line %q: %v", said.Message, err)
	}
	recorded := exectest.Tree(u.run("cat", fmt.Sprintf("%s/tree-%d", unitRecords, line.PID)))
	if len(recorded) != 3 || recorded[0].PID != strconv.Itoa(line.PID) {
		t.Fatalf("the unit's watcher (pid %d) recorded %v; want itself, its setsid'd child and its daemon", line.PID, recorded)
	}
	var tree []treeProc
	var onHost []exectest.Proc
	for _, p := range recorded {
		inner, _ := strconv.Atoi(p.PID)
		host, err := u.ct.HostPID(inner)
		if err != nil {
			t.Fatalf("process %s of the watcher's tree: %v", p.PID, err)
		}
		fd := openPidfd(t, host)
		hp := exectest.Proc{PID: strconv.Itoa(host), Start: p.Start}
		if !hp.Running() { // checked after the pidfd's opening: it is the recorded process's
			t.Fatalf("process %s of the watcher's tree (host pid %d) is gone before the test began", p.PID, host)
		}
		tree = append(tree, treeProc{inner: p.PID, host: hp, fd: fd})
		onHost = append(onHost, hp)
	}
	if err := exectest.AddTree(hostRecords, fmt.Sprintf("unit-%d", line.PID), onHost); err != nil {
		t.Fatal(err)
	}
	return tree
}

// onlyTheService: the unit's control group holds no live process but its
// main one (inner), exec supervisors and the everywhere job's program (it
// has no term, so no deadline): nothing of a singleton's program.
func (u *unit) onlyTheService(inner int) {
	t := u.t
	t.Helper()
	// Each live process of the unit, as "pid job command line" (job: its
	// SNIP_JOBS_JOB, "-" without).
	ps := u.run("sh", "-c", `cg=$(systemctl show -P ControlGroup "$1")
for d in /proc/[0-9]*; do
	grep -q -- "$cg\$" "$d/cgroup" 2>/dev/null || continue
	s=$(sed 's/.*) //' "$d/stat" 2>/dev/null | cut -d' ' -f1)
	[ -n "$s" ] && [ "$s" != Z ] || continue
	job=$(tr '\0' '\n' < "$d/environ" 2>/dev/null | sed -n 's/^SNIP_JOBS_JOB=//p')
	echo "${d#/proc/} ${job:--} $(tr '\0' ' ' < "$d/cmdline")"
done`, "sh", unitName)
	found := false
	for l := range strings.Lines(ps) {
		f := strings.SplitN(strings.TrimSpace(l), " ", 3)
		if len(f) < 3 {
			continue
		}
		switch {
		case f[0] == strconv.Itoa(inner):
			found = true
		case strings.Contains(f[2], supervisor.Arg), f[1] == "program":
		default:
			t.Errorf("with its term over and snip-jobs frozen, the unit holds process %s (job %s): %s", f[0], f[1], f[2])
		}
	}
	if !found {
		t.Fatalf("the unit's processes as listed miss its main process %d:\n%s", inner, ps)
	}
}

// watchersNeverOverlapped: no start of the watcher found a process of an
// earlier run alive: the unit's runs check the unit's earlier trees, the
// host's the host's and the unit's trees the test translated.
func (u *unit) watchersNeverOverlapped(hostRecords string) {
	t := u.t
	t.Helper()
	if o, err := exectest.Overlaps(hostRecords); err != nil || len(o) > 0 {
		t.Errorf("a start of the host's watcher found processes of earlier runs alive: %q (%v)", o, err)
	}
	unitStarts := strings.Count(u.run("cat", unitRecords+"/starts"), "\n")
	if o := u.run("sh", "-c", `cat "$1"/overlaps 2>/dev/null; true`, "sh", unitRecords); o != "" {
		t.Errorf("a start of the unit's watcher found processes of earlier runs alive:\n%s", o)
	}
	t.Logf("the watcher's starts: %d in the unit, %d on the host", unitStarts, len(exectest.Starts(t, hostRecords)))
}

// runEnded matches snip-jobs's line on the end of job's run whose program
// is pid (in the container).
func runEnded(job, pid string) func(systemdtest.Entry) bool {
	var says []func(systemdtest.Entry) bool
	for _, msg := range []string{"program stopped", "program killed by its supervisor", "program done", "program failed"} {
		says = append(says, processSays(msg, `"job":"`+job+`"`, `"pid":`+pid+`,`))
	}
	return func(e systemdtest.Entry) bool {
		return slices.ContainsFunc(says, func(m func(systemdtest.Entry) bool) bool { return m(e) })
	}
}

// openPidfd opens a pidfd of the host's process pid, closed at the end.
func openPidfd(t *testing.T, pid int) int {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// pidfdExited reports whether the process behind pidfd has exited.
func pidfdExited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 1
}

// processState is the state of the host's process pid (R, S, T for stopped,
// Z...; "" when it is gone).
func processState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
