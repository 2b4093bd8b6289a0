// Package childproc is the test bench's one supervisor of child processes:
// snip-dev's instances, the fault harness's instances and etcd members, and
// the commands tests run. A child gets this process's environment without
// what would change how snip-jobs behaves (Env), its output appended to a
// log file, the listening sockets it is passed as systemd would (package
// sockact), and SIGKILL if the supervisor dies, however it dies (package
// pdeathsig). It is stopped the way systemd stops a service: SIGCONT (a
// paused child cannot act on SIGTERM), SIGTERM, and SIGKILL after a bound.
//
// What it does not do: restart a child (its supervisor decides that and
// starts a new Proc), or reach the child's own children (pdeathsig's limit).
package childproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/testbench/pdeathsig"
)

// Env is this process's environment without the variables snip-jobs reads
// (SNIP_JOBS_*) and systemd's (NOTIFY_SOCKET, WATCHDOG_*), so that the
// developer's own settings, or the supervisor's service manager, cannot leak
// into a child; then extra.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SNIP_JOBS_") || strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "WATCHDOG_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// Spec is what to start.
type Spec struct {
	Path string
	Args []string
	// Env is added to Env()'s.
	Env []string
	// Log, if set, is the file (created if absent) that stdout and stderr are
	// appended to, for every start of the same child.
	Log string
	// Stdout and Stderr, if set, also receive the child's output. Only when
	// they are the same writer (or both nil) are the two streams one, their
	// lines in the order the child wrote them, in the log too.
	Stdout, Stderr io.Writer
	// Sockets are passed to the child as systemd's socket activation does.
	Sockets []sockact.Socket
	// OwnGroup puts the child in a process group of its own, so that a
	// Ctrl-C in the supervisor's terminal reaches only the supervisor, which
	// then stops its children in order.
	OwnGroup bool
	// Credential, if set, runs the child as that user and group (the
	// supervisor must be allowed to: root).
	Credential *syscall.Credential
}

// Proc is one started child process.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu     sync.Mutex
	paused bool  // SIGSTOPped and not SIGCONTed since
	err    error // Wait's, once done
}

// Start starts the child described by s.
func Start(s Spec) (*Proc, error) {
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = Env(s.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: s.OwnGroup, Credential: s.Credential}
	var logf *os.File
	if s.Log != "" {
		var err error
		if logf, err = os.OpenFile(s.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
			return nil, fmt.Errorf("childproc: %w", err)
		}
	}
	cmd.Stdout, cmd.Stderr = output(logf, s.Stdout), output(logf, s.Stderr)
	if sameWriter(s.Stdout, s.Stderr) {
		cmd.Stderr = cmd.Stdout // one stream: os/exec then passes one descriptor, lines stay in order
	}
	// A child's own child that outlives it and keeps its output pipe (a shell's
	// sleep) must not keep Done open: its output is cut off after this.
	cmd.WaitDelay = outputGrace
	files, err := sockact.Pass(cmd, s.Sockets...)
	if err == nil {
		err = pdeathsig.Start(cmd, syscall.SIGKILL)
	}
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		if logf != nil {
			logf.Close()
		}
		return nil, fmt.Errorf("childproc: start %s: %w", s.Path, err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		p.mu.Lock()
		p.err, p.paused = err, false
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// outputGrace is how long Done waits, once the child has exited, for the
// rest of its output on a pipe still held by its own children.
const outputGrace = 2 * time.Second

// sameWriter reports whether a and b are the same writer (both nil included),
// as os/exec compares them; writers of types that cannot be compared are not.
func sameWriter(a, b io.Writer) bool {
	if a == nil || b == nil {
		return a == b
	}
	if !reflect.TypeOf(a).Comparable() || !reflect.TypeOf(b).Comparable() {
		return false
	}
	return a == b
}

// output is where one of the child's streams goes: the log file, w, or both.
func output(logf *os.File, w io.Writer) io.Writer {
	switch {
	case logf == nil:
		return w
	case w == nil:
		return logf // a file: the child writes to it itself
	}
	return io.MultiWriter(logf, w)
}

// Pid is the child's process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the child has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the child exited (os/exec's Wait error: nil for status 0); nil
// while it runs.
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// ExitCode is the child's exit status, -1 if a signal killed it or it has not
// exited.
func (p *Proc) ExitCode() int {
	if !p.Exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Signal sends sig to the child, remembering a SIGSTOP until a SIGCONT.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Exited() {
		return fmt.Errorf("childproc: pid %d has exited", p.Pid())
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return nil
}

// Paused reports whether the child was SIGSTOPped and not continued since.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Kill SIGKILLs the child (a paused one too) and waits until it is reaped.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Wait waits up to bound for the child to exit and SIGKILLs it after that;
// it reports whether the child exited by itself.
func (p *Proc) Wait(bound time.Duration) (exited bool) {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		p.Kill()
		return false
	}
}

// ErrKilled is Stop's error when the child had to be SIGKILLed.
var ErrKilled = errors.New("killed it")

// Stop stops the child as systemd does: SIGCONT, SIGTERM, and SIGKILL if it
// has not exited within bound (at once if ctx ends first). It returns once
// the child is reaped, with an error wrapping ErrKilled if SIGKILL was needed.
func (p *Proc) Stop(ctx context.Context, bound time.Duration) error {
	if p.Exited() {
		return nil
	}
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	p.Kill()
	return fmt.Errorf("pid %d did not stop within %v of SIGTERM: %w", p.Pid(), bound, ErrKilled)
}

// Lines returns a writer that calls fn with each complete line written to it
// (without its newline), for a child's output read as it comes: a ready line
// to wait for, lines to prefix and show. One writer per stream.
func Lines(fn func(line string)) io.Writer { return &lines{fn: fn} }

type lines struct {
	fn  func(string)
	buf []byte
}

func (w *lines) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.fn(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}
