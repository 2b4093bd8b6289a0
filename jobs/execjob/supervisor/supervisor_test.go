package supervisor

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snip/snip-jobs/internal/boottime"
)

func TestTheResultSaysHowTheProgramEnded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		code   int
		signal syscall.Signal
	}{
		{"exit 0", `eval "$SAY"; exit 0`, 0, 0},
		{"exit 3", `eval "$SAY"; exit 3`, 3, 0},
		{"killed by SIGUSR1", `eval "$SAY"; kill -USR1 $$`, -1, syscall.SIGUSR1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, tc.script)
			ids := pids(t, r.out, 1)
			<-r.Done()
			res := r.Result()
			if res.Err != nil || res.Code != tc.code || res.Signal != tc.signal || res.Ended != Exited {
				t.Errorf("result %+v, want code %d, signal %v, ended %s", res, tc.code, tc.signal, Exited)
			}
			if ids[0].pid != r.PID() {
				t.Errorf("the program said it is %d; PID says %d", ids[0].pid, r.PID())
			}
			assertGone(t, ids)
			noneLeft(t)
		})
	}
}

// A grandchild that called setsid has left the program's process group and
// session, and a double-forked daemon has also left its parent: neither a
// group kill nor a walk from the program finds them. Stop does.
func TestStopEndsAGrandchildInItsOwnSessionAndADoubleForkedDaemon(t *testing.T) {
	r := start(t, tree)
	ids := pids(t, r.out, 4)
	leaders := 0
	for _, id := range ids {
		if p, err := readStat(id.pid); err == nil && p.sid == id.pid {
			leaders++ // a session of its own: out of the program's group and session
		}
	}
	if leaders != 2 {
		t.Fatalf("%d of the processes lead a session of their own, want 2 (the grandchild and the daemon)", leaders)
	}
	if err := r.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	if res := r.Result(); res.Err != nil || res.Ended != Stopped || res.Terminated < 4 {
		t.Errorf("result %+v, want stopped, all four processes sent SIGTERM", res)
	}
	assertGone(t, ids)
	noneLeft(t)
}

// A program that ignores SIGTERM hears it first, and is killed once the
// grace is over, not before.
func TestAProgramIgnoringSIGTERMHearsItAndIsKilledAfterTheGrace(t *testing.T) {
	const grace = time.Second // for the trap to run: under load it may wait
	r := start(t, `
		trap 'echo term' TERM
		eval "$SAY"
		# wait, not a foreground sleep: a shell runs a trap at once only
		# while in wait (a sleep forked after the SIGTERM would delay it)
		while :; do sleep 1000 & wait $!; done`)
	ids := pids(t, r.out, 1)
	stopped := boottime.Now()
	if err := r.Stop(grace); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	took := boottime.Since(stopped)
	if out := rest(r.out); !slices.Contains(out, "term") {
		t.Errorf("the program never said it had SIGTERM; its output after its pid: %q", out)
	}
	if took < grace {
		t.Errorf("the program was gone %v after Stop, before its grace of %v was over", took, grace)
	}
	res := r.Result()
	if res.Err != nil || res.Ended != Stopped || res.Signal != syscall.SIGKILL || res.Killed < 1 {
		t.Errorf("result %+v, want stopped, the program killed by SIGKILL", res)
	}
	assertGone(t, ids)
	noneLeft(t)
}

// 200 children that each forked again, all ignoring SIGTERM: every one of
// the 401 processes is found and killed.
func TestStopEndsAProgramWithFourHundredDescendants(t *testing.T) {
	r := start(t, `
		trap '' TERM
		i=0
		while [ $i -lt 200 ]; do
			sh -c 'eval "$SAY"; sh -c "$LEAF" & wait' &
			i=$((i+1))
		done
		eval "$SAY"
		wait`)
	ids := pids(t, r.out, 401)
	if err := r.Stop(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	if res := r.Result(); res.Err != nil || res.Ended != Stopped || res.Terminated != 401 || res.Killed != 401 {
		t.Errorf("result %+v, want stopped, 401 processes sent SIGTERM and then SIGKILL", res)
	}
	assertGone(t, ids)
	noneLeft(t)
}

// Loops that keep leaving daemons behind while they are killed: processes
// forked after a pass are found by a later one, until none is left.
func TestAProgramForkingWhileItIsKilledIsStillProvenGone(t *testing.T) {
	r := start(t, `
		trap '' TERM
		for i in 1 2; do
			sh -c 'while :; do sh -c "sh -c \"\$LEAF\" &"; done' &
		done
		wait`)
	ids := pids(t, r.out, 20) // and more coming: kill while they do
	if err := r.Stop(0); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	res := r.Result()
	if res.Err != nil || res.Ended != Stopped || res.Killed < 1+2+20 {
		t.Errorf("result %+v, want stopped, at least the program, its 2 loops and 20 daemons killed", res)
	}
	for _, line := range rest(r.out) {
		if id, ok := said(line); ok {
			ids = append(ids, id)
		}
	}
	t.Logf("%d processes killed; %d daemons had said who they are", res.Killed, len(ids))
	assertGone(t, ids)
	noneLeft(t)
}

// A program that exits leaves a child behind (ignoring SIGTERM): the child
// is stopped too, and Done waits for its SIGKILL.
func TestWhatAProgramLeavesBehindIsStoppedAndDoneWaitsForIt(t *testing.T) {
	r := start(t, `
		trap '' TERM
		sleep 1000 &
		echo "pid $! $(cut -d' ' -f22 /proc/$!/stat)"
		eval "$SAY"
		exit 3`, func(s *Spec) { s.Grace = 300 * time.Millisecond })
	ids := pids(t, r.out, 2)
	<-r.Done()
	if res := r.Result(); res.Err != nil || res.Code != 3 || res.Ended != Exited || res.Terminated != 1 || res.Killed != 1 {
		t.Errorf("result %+v, want the program's exit 3, and its child sent SIGTERM, then killed", res)
	}
	assertGone(t, ids)
	noneLeft(t)
}

// A supervisor that wakes past the deadline (a loaded machine) rightly kills
// without SIGTERM, which leaves nothing to tell about the grace: the test
// tries again with a longer one.
func TestTheDeadlineKillsTheTreeWhenNotExtended(t *testing.T) {
	for grace := 200 * time.Millisecond; ; grace *= 2 {
		var ids []ident
		r, deadline := startWithDeadline(t, grace, `eval "$SAY"; sh -c "$LEAF" & wait`,
			func(r *run, deadline time.Duration) bool {
				var ok bool
				ids, ok = tryPids(r.out, 2)
				return ok && boottime.Now() < deadline-grace // both ran before the deadline's SIGTERM
			})
		<-r.Done()
		if now := boottime.Now(); now < deadline-grace {
			t.Errorf("the run was over %v before its deadline's SIGTERM was due", deadline-grace-now)
		}
		res := r.Result()
		assertGone(t, ids)
		noneLeft(t)
		if res.Err == nil && res.Ended == Deadline && res.Terminated == 0 && res.Killed == 2 && grace < 10*time.Second {
			t.Logf("the supervisor woke past the deadline, with a grace of %v, and killed at once; trying twice that", grace)
			continue
		}
		if res.Err != nil || res.Ended != Deadline || res.Terminated != 2 {
			t.Errorf("result %+v, want ended by the deadline, both processes sent SIGTERM", res)
		}
		return
	}
}

// An extension acknowledged before the first deadline's SIGTERM was due
// keeps the tree alive past that deadline: the Stop sent after it passed
// ends the run, not the deadline.
func TestAnExtendedTreeOutlivesItsFirstDeadline(t *testing.T) {
	const grace = 200 * time.Millisecond
	r, first := startWithDeadline(t, grace, `eval "$SAY"; sh -c "$LEAF" & wait`,
		func(r *run, first time.Duration) bool {
			if err := r.Extend(t.Context(), boottime.Now()+time.Hour); err != nil {
				t.Fatal(err)
			}
			return boottime.Now() < first-grace // else the machine was too slow to tell: try a longer lead
		})
	ids := pids(t, r.out, 2)
	sleepUntil(first)
	if err := r.Stop(grace); err != nil && !errors.Is(err, ErrEnded) {
		t.Fatal(err)
	}
	<-r.Done()
	if res := r.Result(); res.Err != nil || res.Ended != Stopped {
		t.Errorf("result %+v, want stopped (the first deadline no longer applied)", res)
	}
	assertGone(t, ids)
	noneLeft(t)
}

func TestExtendCanBringTheDeadlineCloser(t *testing.T) {
	r := start(t, `eval "$SAY"; exec sleep 1000`, func(s *Spec) {
		s.Deadline, s.Grace = boottime.Now()+time.Hour, 100*time.Millisecond
	})
	ids := pids(t, r.out, 1)
	if err := r.Extend(t.Context(), boottime.Now()+200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	if res := r.Result(); res.Err != nil || res.Ended != Deadline {
		t.Errorf("result %+v, want ended by the deadline", res)
	}
	if err := r.Extend(t.Context(), boottime.Now()+time.Hour); !errors.Is(err, ErrEnded) {
		t.Errorf("Extend after the run: %v, want ErrEnded", err)
	}
	assertGone(t, ids)
}

func TestAProgramThatCannotStartIsAClearErrorAndLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want error
	}{
		{"missing", func(s *Spec) { s.Path = filepath.Join(dir, "missing") }, fs.ErrNotExist},
		{"not executable", func(s *Spec) { s.Path = notExec }, fs.ErrPermission},
		{"deadline already passed", func(s *Spec) { s.Deadline = boottime.Now() }, ErrNoTimeLeft},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{Path: "/bin/true", Grace: time.Second}
			tc.edit(&s)
			p, err := Start(t.Context(), s)
			var se *StartError
			if p != nil || !errors.As(err, &se) || se.Path != s.Path || !errors.Is(err, tc.want) {
				t.Fatalf("Start: %v, %v; want a *StartError for %s that is %v", p, err, s.Path, tc.want)
			}
			t.Log(err)
			noneLeft(t) // Start returned once the supervisor had exited
		})
	}
	if _, err := Start(t.Context(), Spec{Path: "sh"}); err == nil ||
		!strings.Contains(err.Error(), "not absolute") {
		t.Errorf("a relative path: %v", err)
	}
}

// Hide's paths are unreadable to the program and readable to its caller; a
// path that cannot be hidden fails the start, starting nothing.
func TestTheProgramCannotReadWhatHideNames(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "database-url")
	if err := os.WriteFile(secret, []byte("postgres://snip:hunter2@db/snip\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := Start(t.Context(), Spec{Path: "/bin/sh", Args: []string{"-c", `cat "$0" || echo refused`, secret},
		Env: programEnv, Grace: time.Second, Stdout: w, Hide: []string{secret}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	<-p.Done()
	if string(out) != "refused\n" {
		t.Errorf("the program printed %q; want the hidden file refused to it", out)
	}
	if _, err := os.ReadFile(secret); err != nil {
		t.Errorf("the caller cannot read the file any more: %v", err)
	}

	if _, err := Start(t.Context(), Spec{Path: "/bin/true", Grace: time.Second, Hide: []string{"etc/url"}}); err == nil ||
		!strings.Contains(err.Error(), "hiding") {
		t.Errorf("a relative path to hide: %v; want the start refused", err)
	}
	noneLeft(t)
}

func TestASupervisorStartedByHandRefusesToRun(t *testing.T) {
	out, err := exec.Command(testBinary(t), Arg).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "started by snip-jobs itself") {
		t.Errorf("exit %v, output %q; want status 2 and why", err, out)
	}
}

// Signals that end services (a terminal's, an operator's kill, a stop sent
// to snip-jobs's group) do not end a supervisor: it is there when Stop
// comes, and its program did not inherit its indifference to them.
func TestTheSupervisorIgnoresTheSignalsThatEndServices(t *testing.T) {
	r := start(t, `eval "$SAY"; exec sleep 1000`, func(s *Spec) { s.Grace = time.Hour })
	ids := pids(t, r.out, 1)
	p, err := readStat(r.PID())
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP} {
		if err := syscall.Kill(p.ppid, sig); err != nil {
			t.Fatalf("signalling the supervisor %d: %v", p.ppid, err)
		}
	}
	// Pending signals are acted on before the supervisor reads Stop: had
	// one ended it, the Result would say its tree is unproven.
	if err := r.Stop(time.Hour); err != nil && !errors.Is(err, ErrEnded) {
		t.Fatal(err)
	}
	<-r.Done()
	if res := r.Result(); res.Err != nil || res.Ended != Stopped || res.Signal != syscall.SIGTERM {
		t.Errorf("result %+v, want stopped, the program ended by the SIGTERM it did not ignore", res)
	}
	assertGone(t, ids)
	noneLeft(t)
}

// The program gets its Spec's environment, not the caller's, and no
// descriptor but 0, 1 and 2: the pipes to the caller stay with the
// supervisor, so their ends come when the supervisor's do.
func TestTheProgramGetsItsOwnEnvironmentAndNoOtherDescriptor(t *testing.T) {
	t.Setenv("SNIP_SUPERVISOR_TEST_SECRET", "hunter2")
	r := start(t, `
		for fd in 3 4 5 6 7 8 9; do
			if { true >&$fd; } 2>/dev/null; then echo "open $fd"; fi
		done
		env`)
	<-r.Done()
	out := rest(r.out)
	for _, line := range out {
		if strings.HasPrefix(line, "open ") || strings.Contains(line, "hunter2") {
			t.Errorf("the program has %q", line)
		}
	}
	if !slices.Contains(out, programEnv[0]) {
		t.Errorf("the program's environment %q lacks its Spec's %q", out, programEnv[0])
	}
}

// The limit of the design, shown: a supervisor SIGKILLed by someone else
// takes its program with it (Pdeathsig), but the program's own children
// re-parent elsewhere (here, to the tests' process) and run on; the Result
// says the tree is unproven.
func TestASupervisorKilledBySomeoneElseTakesItsProgramButNotTheRest(t *testing.T) {
	r := start(t, tree)
	ids := pids(t, r.out, 4)
	p, err := readStat(r.PID())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.ppid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	if res := r.Result(); !errors.Is(res.Err, ErrUnproven) {
		t.Errorf("result %+v, want ErrUnproven", res)
	}
	var ws syscall.WaitStatus // the program re-parented here, killed by its Pdeathsig
	if _, err := syscall.Wait4(r.PID(), &ws, 0, nil); err != nil || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the program: %v, %v; want it killed by SIGKILL", ws, err)
	}
	survivors := 0
	for _, id := range ids[1:] {
		if q, err := readStat(id.pid); err == nil && q.start == id.start && !q.dead() {
			survivors++
			send(q, syscall.SIGKILL)
		}
	}
	if survivors == 0 {
		t.Errorf("no process of the tree outlived its supervisor; the limit is gone: update the package's doc")
	}
	for { // reap what re-parented here
		if _, err := syscall.Wait4(-1, &ws, 0, nil); err == syscall.ECHILD {
			break
		}
	}
	noneLeft(t)
}
