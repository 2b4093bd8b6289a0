package supervisor

import (
	"encoding/json"
	"errors"
	"os"
	"time"

	"github.com/snip/snip-jobs/internal/boottime"
	"golang.org/x/sys/unix"
)

// supervisor is the state of the supervisor process. One goroutine (Main's)
// owns it; the others only feed its channels.
type supervisor struct {
	self     int
	dec      *json.Decoder // the control pipe
	enc      *json.Encoder // the report pipe
	sigchld  chan os.Signal
	commands chan command // closed at the control pipe's end
	timer    *bootTimer
	program  int

	deadline  time.Duration // CLOCK_BOOTTIME instant by which the tree is dead; 0: none
	grace     time.Duration // how long SIGTERM precedes the deadline
	ended     Ending        // how the end began; "" while the run goes on
	termSent  bool
	final     bool // SIGKILL everything now
	childless bool // wait4 said ECHILD: the tree is proven gone

	terminated, killed map[ident]bool
}

// run follows the program until its tree is proven gone.
func (s *supervisor) run() {
	for !s.childless {
		s.checkClock()
		if s.final {
			s.killAll()
			return
		}
		if err := s.timer.set(s.next()); err != nil {
			s.end(Deadline) // a deadline that cannot be kept is kept now
			continue
		}
		// Each event is judged after the clock: a Stop, an Extend or an exit
		// that came after the deadline's instant finds the end begun.
		select {
		case c, ok := <-s.commands:
			s.checkClock()
			switch {
			case !ok:
				s.end(ParentGone) // nobody will move the deadline any more
			case !s.final:
				s.obey(c)
			}
		case <-s.timer.C:
		case <-s.sigchld:
			s.checkClock()
			s.reap()
		}
	}
}

// next is the instant the timer must wake the loop at: SIGTERM's while the
// run goes on, SIGKILL's once it is ending.
func (s *supervisor) next() time.Duration {
	switch {
	case s.deadline == 0:
		return 0
	case s.ended == "":
		return max(s.deadline-s.grace, 1)
	default:
		return s.deadline
	}
}

func (s *supervisor) checkClock() {
	if s.deadline == 0 {
		return
	}
	now := boottime.Now()
	if s.ended == "" && now >= s.deadline-s.grace {
		s.begin(Deadline, s.deadline)
	}
	if s.ended != "" && now >= s.deadline {
		s.final = true
	}
}

// begin starts the end of the run, unless it began already: SIGTERM to the
// tree now, SIGKILL at killAt, or at the deadline if that comes first.
func (s *supervisor) begin(how Ending, killAt time.Duration) {
	if s.ended == "" {
		s.ended = how
	}
	if s.deadline == 0 || killAt < s.deadline {
		s.deadline = killAt
	}
	if !s.termSent && boottime.Now() < s.deadline {
		s.termSent = true
		signalTree(s.self, unix.SIGTERM, true, s.terminated)
	}
}

// end kills the tree at once.
func (s *supervisor) end(how Ending) {
	if s.ended == "" {
		s.ended = how
	}
	s.final = true
}

func (s *supervisor) obey(c command) {
	if c.Stop != nil {
		if *c.Stop <= 0 {
			s.end(Stopped)
		} else {
			s.begin(Stopped, boottime.Now()+*c.Stop)
		}
	}
	if c.Seq != 0 {
		// Once the end began, a SIGTERM cannot be taken back: the deadline
		// may still come earlier, never later.
		applied := c.Deadline > 0 && (s.ended == "" || c.Deadline < s.deadline)
		if applied {
			s.deadline = c.Deadline
		}
		s.send(report{Ack: &ack{Seq: c.Seq, Applied: applied, Deadline: s.deadline}})
	}
}

// reap collects every child that exited (the program, and orphans of the
// tree that re-parented here), reports the program's status, and notes
// when no child is left.
func (s *supervisor) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			s.childless = true
			return
		case err != nil || pid <= 0:
			return
		case pid == s.program:
			st := exitStatus{Code: ws.ExitStatus()}
			if ws.Signaled() {
				st.Signal = int(ws.Signal())
			}
			s.send(report{Exit: &st})
			if s.ended == "" { // what the program left behind goes too
				s.begin(Exited, boottime.Now()+s.grace)
			}
		}
	}
}

// killAll SIGKILLs every live descendant, pass after pass, until wait4 says
// no child is left. A killed process cannot fork, so each pass finds only
// what forked before the previous one landed, and a fork bomb runs out.
func (s *supervisor) killAll() {
	pause := time.Millisecond
	for {
		s.reap()
		if s.childless {
			return
		}
		if signalTree(s.self, unix.SIGKILL, false, s.killed) > 0 {
			pause = time.Millisecond
		}
		// A grandchild's death signals its parent, not us; a process in
		// uninterruptible sleep dies when it wakes: look again soon.
		t := time.NewTimer(pause)
		select {
		case <-s.sigchld:
		case <-t.C:
		}
		t.Stop()
		pause = min(2*pause, 100*time.Millisecond)
	}
}
