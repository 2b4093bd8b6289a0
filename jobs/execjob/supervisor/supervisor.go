// Package supervisor runs an exec job's program for one term in a supervisor
// process of its own, so that no process of the program's tree is alive
// outside the term on a live host, even when snip-jobs is frozen (SIGSTOP,
// a stalled VM) or SIGKILLed, and so that a run is reported over only once
// every process of its tree is proven gone.
//
// The supervisor is the snip-jobs binary re-executed with the hidden first
// argument Arg (cmd/snip-jobs calls Main). It makes itself a child subreaper,
// so every orphan of the tree (a child that called setsid, a double-forked
// daemon) re-parents to it; it starts the program in a process group of its
// own; and it ends the tree:
//
//   - at the deadline, an instant on CLOCK_BOOTTIME that the caller moves
//     with each renewal of its lease (Extend): SIGTERM at deadline − grace,
//     SIGKILL at the deadline. CLOCK_BOOTTIME counts while the host is
//     suspended, as the lease's server does; CLOCK_MONOTONIC and Go's timers
//     do not;
//   - on Stop: SIGTERM now, SIGKILL after the grace;
//   - when the control pipe from the caller reaches EOF (the caller died, or
//     let go without a Stop): SIGKILL at once, since nobody will move the
//     deadline any more;
//   - when the program exits on its own: what it left behind gets SIGTERM,
//     the grace, SIGKILL.
//
// Signals go to every live descendant found in /proc (by parent chain),
// through a pidfd checked against the process's start time, so a reused pid
// is never signalled. SIGKILL passes repeat until wait4 says ECHILD: only
// then is the tree proven gone, and only then does the supervisor report it
// and exit. It ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT (and the
// terminal's stop signals), and runs in a process group of its own, so that
// signals aimed at snip-jobs or its group do not reach it.
//
// Limits:
//   - A supervisor SIGKILLed by someone else (an operator, the OOM killer)
//     enforces nothing more: its program dies of its Pdeathsig, but the
//     program's own children re-parent to the next subreaper up (or init)
//     and run on; Result.Err says so (ErrUnproven). A supervisor frozen by
//     someone else enforces nothing until it is continued.
//   - A descendant running as another user (a set-user-ID binary) cannot be
//     signalled; the supervisor waits for it to exit, and Done with it. A
//     process in uninterruptible sleep dies when it wakes.
//   - A process that the program has another process start (a request over
//     a socket to a daemon, at(1), systemd-run) is not in the tree.
//   - A program of the same user can signal, freeze or ptrace its
//     supervisor: this guards against accidents, not against an enemy.
//   - Without a deadline (Spec.Deadline 0) a frozen caller stops nothing.
//
// Start returns once the program is exec'd, rather than taking an exec.Cmd:
// what runs in the tree and how it ends belong to the supervisor; the
// caller moves the deadline, stops, and reads the outcome. Extend takes a
// context and returns once the supervisor has the new deadline, so that a
// caller (and a test) knows which deadline is in force; Stop only sends.
package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Arg is the hidden first argument that makes the snip-jobs binary a
// supervisor; it shows in ps beside the run's Label.
const Arg = "__exec-supervisor"

// Spec is one run of a program.
type Spec struct {
	Path string   // absolute
	Args []string // after the program's name, which is Path
	Env  []string // the program's whole environment; nil is an empty one
	Dir  string   // "" is the caller's working directory

	// Stdout and Stderr are the program's (nil: /dev/null), usually the write
	// ends of pipes whose read ends the caller keeps. The supervisor holds
	// them too, so they reach EOF once the run is over. The caller may close
	// its copies when Start returns.
	Stdout, Stderr *os.File

	// Deadline is the CLOCK_BOOTTIME instant (internal/boottime.Now) by
	// which the whole tree must be dead; 0: none. Start refuses a deadline
	// less than Grace ahead (ErrNoTimeLeft).
	Deadline time.Duration
	// Grace is how long SIGTERM precedes SIGKILL at the deadline and after
	// the program's own exit.
	Grace time.Duration

	// Hide are paths the program's tree may not read (the service's secret
	// files): the supervisor restricts itself so as it starts, ahead of its
	// order (internal/unreadable; check its Available first). A failure to
	// do so fails the start.
	Hide []string

	// Label is shown in the supervisor's arguments for ps (job and run); no
	// secrets.
	Label string
	// Instance is the snip-jobs instance whose run this is, also in the
	// supervisor's arguments: a death reclaim of that instance waits for its
	// supervisors to be gone (Supervising) before other instances may take
	// its jobs.
	Instance string
	// Binary is the executable to run as the supervisor; "" is this
	// process's own (/proc/self/exe, the file it was started from even if a
	// package upgrade replaced it since, so both ends speak the same protocol).
	Binary string
}

// Ending is how a run ended: what began its end.
type Ending string

const (
	Exited     Ending = "exited"      // the program exited on its own
	Stopped    Ending = "stopped"     // Stop
	Deadline   Ending = "deadline"    // the deadline passed (or reached its grace) without an extension
	ParentGone Ending = "parent-gone" // the control pipe reached EOF: the caller died, or Start's ctx ended
)

// Result is the outcome of a run, known once Done is closed.
type Result struct {
	Code   int            // the program's exit status; -1 if a signal ended it, or its end was not seen
	Signal syscall.Signal // the signal that ended the program, or 0
	Ended  Ending
	// Terminated and Killed count the processes of the tree that were sent
	// SIGTERM, and that were still alive for SIGKILL.
	Terminated, Killed int
	// Err is set when the supervisor exited without proving the tree gone
	// (it was killed, or crashed): wraps ErrUnproven.
	Err error
}

var (
	// ErrUnproven is the supervisor ending without its report that the tree
	// is gone: some of it may still run.
	ErrUnproven = errors.New("supervisor: ended without proving the program's processes gone")
	// ErrEnded answers an Extend that cannot move the deadline later (the
	// run is ending: a SIGTERM cannot be taken back) and an Extend or Stop
	// of a run that is over.
	ErrEnded = errors.New("supervisor: the run is ending or over")
	// ErrNoTimeLeft is a start refused because the deadline is less than
	// the grace ahead.
	ErrNoTimeLeft = errors.New("the deadline leaves the program no time")
)

// StartError is a program that could not be started. Err is a
// syscall.Errno when the exec failed (errors.Is(err, fs.ErrNotExist) and
// fs.ErrPermission work), or ErrNoTimeLeft.
type StartError struct {
	Path string
	Err  error
}

func (e *StartError) Error() string { return "supervisor: start " + e.Path + ": " + e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// Process is a running supervisor and its program.
type Process struct {
	cmd  *exec.Cmd
	path string // the program's
	pid  int

	wmu  sync.Mutex // one message at a time on the control pipe
	ctrl *os.File
	enc  *json.Encoder
	seq  uint64

	amu  sync.Mutex
	acks map[uint64]chan ack // Extends waiting for their answer

	ready    chan struct{} // closed once the supervisor waits for its order
	started  chan struct{} // closed at the report of the pid or of the start's failure
	startErr error
	done     chan struct{}
	res      Result
}

func (s Spec) check() error {
	switch {
	case !filepath.IsAbs(s.Path):
		return fmt.Errorf("supervisor: the program's path %q is not absolute", s.Path)
	case s.Deadline < 0 || s.Grace < 0:
		return errors.New("supervisor: a negative deadline or grace")
	}
	return nil
}
