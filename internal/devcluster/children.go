package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/internal/pdeathsig"
	"github.com/snip/snip-jobs/internal/sockact"
	"github.com/snip/snip-jobs/leadership"
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
	cmd      *exec.Cmd
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
	if ch.cmd != nil && ch.cmd.Process != nil {
		st.PID = ch.cmd.Process.Pid
	}
	return st
}

// start starts the process. Its output is appended to the log file (and
// copied to the cluster's ChildOutput).
func (ch *child) start() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.stopDownLocked() // the port is the new process's
	logf, err := os.OpenFile(ch.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	cmd := exec.Command(ch.c.cfg.Executable, "run", "--config", ch.config, "--dev-control", ch.c.controlURL)
	cmd.Env = childEnv()
	// Its own process group: a Ctrl-C in the terminal reaches the supervisor
	// only, which then stops the instances in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var w io.Writer = logf
	if out := ch.c.cfg.ChildOutput; out != nil {
		w = io.MultiWriter(logf, &prefixWriter{out: out, mu: &ch.c.childOutMu, prefix: ch.name + " | "})
	}
	cmd.Stdout, cmd.Stderr = w, w
	files, err := sockact.Pass(cmd, ch.socks...)
	if err != nil {
		logf.Close()
		return fmt.Errorf("devcluster: start %s: %w", ch.name, err)
	}
	// SIGKILL if the supervisor dies: its etcd and database go with it.
	err = pdeathsig.Start(cmd, syscall.SIGKILL)
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		logf.Close()
		return fmt.Errorf("devcluster: start %s: %w", ch.name, err)
	}
	done := make(chan struct{})
	ch.cmd, ch.state, ch.exit, ch.done, ch.expected = cmd, stateRunning, "", done, false
	go ch.c.routeChallenges()
	go func() {
		err := cmd.Wait()
		logf.Close()
		ch.mu.Lock()
		if ch.cmd == cmd { // always, since restart waits for this exit before starting anew
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

// reclaim does what systemd's ExecStopPost= does for the service once the
// process has exited (and been reaped): it revokes the lease the process left
// behind, if any, so that its jobs move now rather than when the lease
// expires. It returns what to add to the exit's announcement.
func (ch *child) reclaim() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := leadership.Reclaim(ctx, ch.c.cli, prefix, ch.name, "")
	switch {
	case err != nil:
		return fmt.Sprintf(" and its lease could not be revoked (%v): its jobs move once it expires, within %v", err, ch.c.cfg.TTL)
	case got.Revoked:
		return fmt.Sprintf("; revoked the lease it left (pid %d), so its jobs move now", got.Registration.PID)
	}
	return ""
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
	if ch.cmd == nil || ch.state == stateExited {
		return 0, badRequest("%s is not running (%s): restart it first", ch.name, ch.exit)
	}
	if err := ch.cmd.Process.Signal(sig); err != nil {
		return 0, fmt.Errorf("signal %s: %w", ch.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		ch.state = statePaused
	case syscall.SIGCONT:
		ch.state = stateRunning
	}
	return ch.cmd.Process.Pid, nil
}

// kill sends SIGKILL, whatever the state; it does not wait.
func (ch *child) kill() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.cmd != nil && ch.state != stateExited {
		_ = ch.cmd.Process.Kill()
	}
}

// stop stops the process cleanly: SIGCONT if paused, SIGTERM, and SIGKILL if
// it has not exited within bound (or at once if ctx is done). It returns an
// error only if SIGKILL was needed.
func (ch *child) stop(ctx context.Context, bound time.Duration) error {
	ch.mu.Lock()
	if ch.cmd == nil || ch.state == stateExited {
		ch.mu.Unlock()
		return nil
	}
	ch.expected = true
	p, done := ch.cmd.Process, ch.done
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	ch.mu.Unlock()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	_ = p.Kill()
	<-done
	return fmt.Errorf("%s did not stop within %v of SIGTERM: killed it", ch.name, bound)
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

// childEnv is this process's environment without what would change how an
// instance behaves: snip-jobs' own variables and systemd's.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SNIP_JOBS_") || strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "WATCHDOG_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// prefixWriter writes whole lines to out, each prefixed; the writers of
// several children share out and mu.
type prefixWriter struct {
	out    io.Writer
	mu     *sync.Mutex
	prefix string
	buf    []byte
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.mu.Lock()
		_, _ = fmt.Fprintf(w.out, "%s%s\n", w.prefix, w.buf[:i])
		w.mu.Unlock()
		w.buf = w.buf[i+1:]
	}
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
