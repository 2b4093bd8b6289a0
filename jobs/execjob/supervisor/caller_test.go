package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/snip/snip-jobs/internal/boottime"
	"golang.org/x/sys/unix"
)

// callerEnv makes the test binary a caller (actAsCaller); its value is the
// run's deadline, a CLOCK_BOOTTIME instant in nanoseconds, or "none".
const callerEnv = "SNIP_SUPERVISOR_TEST_CALLER"

// callerGrace is the callers' runs' grace.
const callerGrace = 200 * time.Millisecond

// tree is a program whose tree escapes a process-group kill: a child, its
// child in a session of its own, and a double-forked daemon in another. It
// first names its supervisor (its parent).
const tree = `
	echo "supervisor $PPID"
	eval "$SAY"
	sh -c 'eval "$SAY"; setsid sh -c "$LEAF" & wait' &
	( setsid sh -c "$LEAF" & )
	wait`

// actAsCaller starts tree under a supervisor, with the program's output on
// its own stdout, and waits for the run to end: the process the tests
// freeze or kill. It exits 3 when the deadline left no time.
func actAsCaller() int {
	var deadline time.Duration
	if v := os.Getenv(callerEnv); v != "none" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		deadline = time.Duration(n)
	}
	p, err := Start(context.Background(), Spec{Path: "/bin/sh", Args: []string{"-c", tree}, Env: programEnv,
		Stdout: os.Stdout, Stderr: os.Stderr, Deadline: deadline, Grace: callerGrace})
	if errors.Is(err, ErrNoTimeLeft) {
		return 3
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-p.Done()
	return 0
}

// caller is a running actAsCaller, with what its run's program said.
type caller struct {
	cmd        *exec.Cmd
	supervisor int     // the supervisor's pid
	tree       []ident // the four processes of the tree
}

// startCaller starts a caller whose run has the deadline given (callerEnv's
// value) and waits until its tree runs. It returns nil when the deadline
// came first: before the start (exit 3) or before the tree said who it is.
func startCaller(t *testing.T, deadline string) *caller {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testBinary(t))
	cmd.Env = append(os.Environ(), callerEnv+"="+deadline)
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := lines(r)
	c := &caller{cmd: cmd}
	t.Cleanup(func() { c.cmd.Process.Kill() })
	first, ok := <-out
	if ok {
		if _, err := fmt.Sscanf(first, "supervisor %d", &c.supervisor); err != nil {
			t.Fatalf("the program's first line %q does not name its supervisor", first)
		}
		c.tree, ok = tryPids(out, 4)
	}
	if !ok { // the caller ended
		cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); deadline == "none" || (code != 0 && code != 3) {
			t.Fatalf("the caller ended before its program's tree said who it is: %v", cmd.ProcessState)
		}
		return nil
	}
	go func() { // the tree writes nothing more; drain anyway
		for range out {
		}
	}()
	return c
}

// reap ends the caller and collects the supervisor, which re-parented to
// the tests' process (a subreaper) when its caller died; it returns how the
// supervisor exited.
func (c *caller) reap(t *testing.T) unix.WaitStatus {
	t.Helper()
	c.cmd.Process.Kill()
	c.cmd.Wait()
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(c.supervisor, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("wait4(supervisor %d): %v", c.supervisor, err)
		}
		return ws
	}
}

// A caller frozen with a run in progress cannot stop it; its supervisor,
// not frozen with it, kills the tree at the deadline all the same.
func TestAFrozenCallersTreeDiesAtItsDeadline(t *testing.T) {
	for lead := time.Second; ; lead *= 2 {
		deadline := boottime.Now() + lead
		c := startCaller(t, strconv.FormatInt(int64(deadline), 10))
		if c == nil {
			t.Logf("the deadline came before the tree ran with a lead of %v; trying twice that", lead)
			continue
		}
		if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		var info unix.Siginfo // until it is stopped
		if err := unix.Waitid(unix.P_PID, c.cmd.Process.Pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil); err != nil {
			t.Fatal(err)
		}
		if boottime.Now() >= deadline-callerGrace {
			t.Logf("the caller froze after its deadline's SIGTERM was due with a lead of %v; trying twice that", lead)
			c.reap(t)
			continue
		}
		waitExit(t, c.supervisor) // the supervisor exits once the tree is gone
		if now := boottime.Now(); now < deadline-callerGrace {
			t.Errorf("the supervisor was done %v before the deadline's SIGTERM was due", deadline-callerGrace-now)
		}
		assertGone(t, c.tree)
		if ws := c.reap(t); ws.ExitStatus() != 0 {
			t.Errorf("the supervisor exited with %v", ws)
		}
		noneLeft(t)
		return
	}
}

// A caller killed with a run in progress: its control pipe's end tells the
// supervisor, which kills the tree at once (the run has no deadline, and
// nobody asked it to stop).
func TestAKilledCallersTreeIsKilledAtOnce(t *testing.T) {
	c := startCaller(t, "none")
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if ws := c.reap(t); ws.ExitStatus() != 0 {
		t.Errorf("the supervisor exited with %v", ws)
	}
	assertGone(t, c.tree)
	noneLeft(t)
}
