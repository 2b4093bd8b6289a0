package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"

	"github.com/snip/snip-jobs/internal/boottime"
	"github.com/snip/snip-jobs/internal/unreadable"
	"golang.org/x/sys/unix"
)

// The supervisor's descriptors, as Start passes them.
const (
	controlFD = 3 // read: the caller's order, then its commands; EOF when the caller is gone
	reportFD  = 4 // write: what the supervisor reports
)

// Main is the supervisor process. cmd/snip-jobs calls it first thing when its
// first argument is Arg, and exits with what it returns: 0 once the
// program's tree is proven gone (or nothing was started), 2 at once when the
// process was not started by Start (descriptors 3 and 4 are not its pipes).
func Main() int {
	// The program's Pdeathsig fires when the thread that started it exits
	// (Linux's parent is the thread): this goroutine keeps that thread to the end.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := checkPipes(); err != nil {
		fmt.Fprintf(os.Stderr, "snip-jobs: %s is the supervisor of an exec job's run, started by snip-jobs itself: %v\n", Arg, err)
		return 2
	}
	// Only its control pipe or SIGKILL ends a supervisor: what a terminal or
	// a hasty kill sends is caught and dropped. Notify, not Ignore: ignored
	// signals would stay ignored in the program.
	signal.Notify(make(chan os.Signal, 1), unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT,
		unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU)
	s := &supervisor{
		self:       os.Getpid(),
		sigchld:    make(chan os.Signal, 1),
		commands:   make(chan command),
		terminated: map[ident]bool{},
		killed:     map[ident]bool{},
	}
	signal.Notify(s.sigchld, unix.SIGCHLD)
	setupErr := errors.Join(closeOnExec(), hide())
	s.dec = json.NewDecoder(os.NewFile(controlFD, "control"))
	s.enc = json.NewEncoder(os.NewFile(reportFD, "report"))
	return s.serve(setupErr)
}

// checkPipes refuses to run without the caller's pipes.
func checkPipes() error {
	for _, fd := range []int{controlFD, reportFD} {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("descriptor %d: %w", fd, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFIFO {
			return fmt.Errorf("descriptor %d is not a pipe", fd)
		}
	}
	return nil
}

// hide makes the paths the caller named (hideEnv) unreadable to this thread,
// which starts the program (Main locked it): the program and its tree
// inherit the restriction.
func hide() error {
	v, ok := os.LookupEnv(hideEnv)
	if !ok {
		return nil
	}
	var paths []string
	if err := json.Unmarshal([]byte(v), &paths); err != nil {
		return fmt.Errorf("%s: %w", hideEnv, err)
	}
	if err := unreadable.Restrict(paths); err != nil {
		return fmt.Errorf("hiding the service's secret files from the program: %w", err)
	}
	return nil
}

// closeOnExec keeps every descriptor but 0, 1 and 2 from the program: the
// control pipe (a program holding it would keep its EOF from coming when
// the caller dies) and anything the caller let through.
func closeOnExec() error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	entries, err := os.ReadDir("/proc/self/fd") // Linux before 5.11
	if err != nil {
		return fmt.Errorf("marking descriptors close-on-exec: %w", err)
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
	return nil
}

// serve runs one program from the caller's order to the proof that its tree
// is gone.
func (s *supervisor) serve(setupErr error) int {
	s.send(report{Ready: true}) // its start is over: a spare waits for its order from here
	var o order
	if err := s.dec.Decode(&o); err != nil {
		return 0 // the caller went before saying what to run: nothing started
	}
	s.deadline, s.grace = o.Deadline, o.Grace
	pid, err := s.start(o, setupErr)
	if err != nil {
		f := &startFailure{Message: err.Error(), Late: errors.Is(err, ErrNoTimeLeft)}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			f.Errno = int(errno)
		}
		s.send(report{StartErr: f})
		return 0
	}
	s.program = pid
	s.send(report{PID: pid})
	go s.readCommands()
	s.run()
	s.send(report{Gone: &gone{Ended: s.ended, Terminated: len(s.terminated), Killed: len(s.killed)}})
	return 0
}

// start makes the supervisor a subreaper and starts the program, unless the
// deadline leaves it no time.
func (s *supervisor) start(o order, setupErr error) (int, error) {
	if setupErr != nil {
		return 0, setupErr
	}
	// Every orphan of the tree re-parents here, where the kill finds it.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	t, err := newBootTimer()
	if err != nil {
		return 0, err
	}
	s.timer = t
	if o.Deadline > 0 && boottime.Now() >= o.Deadline-o.Grace {
		return 0, ErrNoTimeLeft
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	env := o.Env
	if env == nil {
		env = []string{} // nil would hand on the supervisor's own
	}
	p, err := os.StartProcess(o.Path, append([]string{o.Path}, o.Args...), &os.ProcAttr{
		Dir:   o.Dir,
		Env:   env,
		Files: []*os.File{null, os.Stdout, os.Stderr},
		// Its own process group, away from the terminal's signals; SIGKILL
		// if the supervisor dies (only the program: see the package's limits).
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return 0, err
	}
	pid := p.Pid
	p.Release() // wait4(-1) reaps it, with every orphan
	return pid, nil
}

func (s *supervisor) readCommands() {
	defer close(s.commands)
	for {
		var c command
		if err := s.dec.Decode(&c); err != nil {
			return // EOF: the caller died or let go; garbage: as good as gone
		}
		s.commands <- c
	}
}

// send reports to the caller. A caller gone makes it fail (EPIPE: fd 4 is
// not stdout or stderr, so no SIGPIPE ends the process); the supervisor
// goes on regardless, since the tree must die all the same. A frozen caller
// cannot fill the pipe: at most one report answers each command, plus three.
func (s *supervisor) send(r report) { _ = s.enc.Encode(r) }
