package devcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/testbench/childproc"
)

// Process states, as /dev/state and the status pages show them.
const (
	stateRunning    = "running"
	statePaused     = "paused"
	stateExited     = "exited"
	stateRestarting = "restarting"
)

// child is one instance: a `snip-jobs run` process, started again by restart.
type child struct {
	c       *Cluster
	name    string
	config  string
	logPath string
	page    string
	port    int              // of its admin and status page
	socks   []sockact.Socket // its admin (and challenge) sockets, held by the supervisor
	// challenge is its HTTP-01 listener's address ("" without certrenew).
	challenge string

	op sync.Mutex // one action (kill, pause, restart...) at a time

	mu       sync.Mutex
	proc     *childproc.Proc
	state    string
	exit     string        // how the last process ended
	done     chan struct{} // closed when the current process has exited
	expected bool          // its exit was asked for (restart, Close)
	down     *downServer   // answers its port while no process runs (down.go)
}

type childInfo struct {
	PID   int
	State string
	Exit  string
}

func (ch *child) info() childInfo {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	st := childInfo{State: ch.state, Exit: ch.exit}
	if ch.proc != nil {
		st.PID = ch.proc.Pid()
	}
	return st
}

// start starts the process. Its output is appended to the log file (and
// copied to the cluster's ChildOutput).
func (ch *child) start() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.stopDownLocked() // the port is the new process's
	spec := childproc.Spec{
		Path: ch.c.cfg.Executable, Args: []string{"run", "--config", ch.config, "--dev-control", ch.c.controlURL},
		Log: ch.logPath, Sockets: ch.socks,
		// Ctrl-C in the terminal reaches the supervisor only, which then
		// stops the instances in order.
		OwnGroup: true,
	}
	if out := ch.c.cfg.ChildOutput; out != nil {
		spec.Stdout = childproc.Lines(func(line string) {
			ch.c.childOutMu.Lock()
			defer ch.c.childOutMu.Unlock()
			_, _ = fmt.Fprintf(out, "%s | %s\n", ch.name, line)
		})
		spec.Stderr = spec.Stdout
	}
	proc, err := childproc.Start(spec)
	if err != nil {
		return fmt.Errorf("devcluster: %s: %w", ch.name, err)
	}
	done := make(chan struct{})
	ch.proc, ch.state, ch.exit, ch.done, ch.expected = proc, stateRunning, "", done, false
	go ch.c.routeChallenges()
	go func() {
		<-proc.Done()
		err := proc.Err()
		ch.mu.Lock()
		if ch.proc == proc { // always, since restart waits for this exit before starting anew
			ch.state, ch.exit = stateExited, describeExit(err)
		}
		expected := ch.expected
		ch.mu.Unlock()
		ch.c.routeChallenges()
		reclaimed := ch.reclaim()
		ch.serveDown()
		close(done)
		if !expected && !ch.c.closing() {
			ch.c.say("%s exited (%s)%s; restart it with the page's button or POST %s/dev/restart?instance=%s",
				ch.name, describeExit(err), reclaimed, ch.c.controlURL, ch.name)
		}
	}()
	return nil
}

// reclaim ends the lease the exited process left behind (package-level
// reclaim) and returns what to add to the exit's announcement.
func (ch *child) reclaim() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return reclaim(ctx, ch.c.terms.cluster(), ch.c.pool, ch.name, ch.c.cfg.TTL)
}

func describeExit(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + signalName(ws.Signal())
		}
		return ee.String()
	}
	return err.Error()
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return s.String()
}

// signal sends sig to the running (or paused) process.
func (ch *child) signal(sig syscall.Signal) (pid int, err error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.proc == nil || ch.state == stateExited {
		return 0, badRequest("%s is not running (%s): restart it first", ch.name, ch.exit)
	}
	if err := ch.proc.Signal(sig); err != nil {
		return 0, fmt.Errorf("signal %s: %w", ch.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		ch.state = statePaused
	case syscall.SIGCONT:
		ch.state = stateRunning
	}
	return ch.proc.Pid(), nil
}

// kill sends SIGKILL, whatever the state; it does not wait.
func (ch *child) kill() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.proc != nil && ch.state != stateExited {
		_ = ch.proc.Signal(syscall.SIGKILL)
	}
}

// stop stops the process cleanly (childproc's Stop: SIGCONT, SIGTERM, SIGKILL
// after bound or once ctx is done) and waits until its exit is handled. It
// returns an error only if SIGKILL was needed.
func (ch *child) stop(ctx context.Context, bound time.Duration) error {
	ch.mu.Lock()
	if ch.proc == nil || ch.state == stateExited {
		ch.mu.Unlock()
		return nil
	}
	ch.expected = true
	proc, done := ch.proc, ch.done
	ch.mu.Unlock()
	err := proc.Stop(ctx, bound)
	<-done
	if err != nil {
		return fmt.Errorf("%s: %w", ch.name, err)
	}
	return nil
}

// restart stops the process (if it runs) and starts it again.
func (ch *child) restart(ctx context.Context) (string, error) {
	before := ch.info()
	if before.State != stateExited {
		ch.mu.Lock()
		ch.state = stateRestarting
		ch.mu.Unlock()
		if err := ch.stop(ctx, StopBound); err != nil {
			ch.c.say("%v", err)
		}
	}
	if err := ch.start(); err != nil {
		return "", err
	}
	after := ch.info()
	if before.State == stateExited {
		return fmt.Sprintf("started %s again (pid %d)", ch.name, after.PID), nil
	}
	return fmt.Sprintf("restarted %s: SIGTERM to pid %d (it resigned its terms), now pid %d", ch.name, before.PID, after.PID), nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
