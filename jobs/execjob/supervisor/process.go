package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Start starts a supervisor and, through it, the program. It returns once
// the program is exec'd (PID known), or with a *StartError once the
// supervisor that could not start it has exited. ctx bounds only the start:
// when it ends first, the supervisor kills whatever it started, and Start
// returns once that is proven gone. The run's life is Extend's, Stop's and
// the deadline's.
func Start(ctx context.Context, s Spec) (*Process, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	sp, err := Prepare(s)
	if err != nil {
		return nil, err
	}
	return sp.Start(ctx, s)
}

// Spare is a supervisor started ahead of its run (Prepare), waiting for
// what to run: starting a supervisor costs the snip-jobs binary's whole
// start (its packages' init, ~15 ms), which a run then does not wait for
// once the spare is Ready. An unused spare exits once Closed, or when its
// caller dies.
type Spare struct {
	p *Process
}

// Prepare starts a supervisor for a run to come, with s's Binary, Label,
// Instance, Hide, Stdout and Stderr (the rest is Start's).
func Prepare(s Spec) (*Spare, error) {
	p, rep, err := spawn(s)
	if err != nil {
		return nil, err
	}
	go p.follow(rep)
	return &Spare{p: p}, nil
}

// Ready is closed once the spare's supervisor has started and waits for its
// order (or has exited).
func (sp *Spare) Ready() <-chan struct{} { return sp.p.ready }

// Start runs s's program (Path, Args, Env, Dir, Deadline, Grace) under the
// spare, as the package's Start does. A spare starts one program.
func (sp *Spare) Start(ctx context.Context, s Spec) (*Process, error) {
	if err := s.check(); err != nil {
		sp.Close()
		return nil, err
	}
	p := sp.p
	p.path = s.Path
	err := p.write(order{Path: s.Path, Args: s.Args, Env: s.Env, Dir: s.Dir, Deadline: s.Deadline, Grace: s.Grace})
	if err != nil {
		p.closeControl() // the supervisor is gone; follow says why
	}
	select {
	case <-p.started:
	case <-ctx.Done():
		p.closeControl() // EOF: it kills what it started and exits
		<-p.done
		return nil, fmt.Errorf("supervisor: start %s: %w", s.Path, context.Cause(ctx))
	}
	switch {
	case p.startErr != nil:
		<-p.done
		return nil, p.startErr
	case p.pid == 0: // it exited before saying anything
		<-p.done
		return nil, fmt.Errorf("supervisor: start %s: %w", s.Path, p.res.Err)
	}
	return p, nil
}

// Close ends a spare that started nothing: it exits at its control pipe's
// EOF, and Close waits for it.
func (sp *Spare) Close() {
	sp.p.closeControl()
	<-sp.p.done
}

// spawn starts the supervisor process with its two pipes.
func spawn(s Spec) (*Process, *os.File, error) {
	bin, argv0 := s.Binary, s.Binary
	if bin == "" {
		bin, argv0 = "/proc/self/exe", os.Args[0]
	}
	args := []string{argv0, Arg}
	if s.Instance != "" {
		args = append(args, ownerArg(s.Instance, os.Getpid()))
	}
	if s.Label != "" {
		args = append(args, s.Label)
	}
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("supervisor: %w", err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctrlR.Close()
		ctrlW.Close()
		return nil, nil, fmt.Errorf("supervisor: %w", err)
	}
	env := []string{} // it needs no more, and the caller's holds secrets
	if len(s.Hide) > 0 {
		hide, err := json.Marshal(s.Hide)
		if err != nil {
			return nil, nil, fmt.Errorf("supervisor: %w", err)
		}
		env = append(env, hideEnv+"="+string(hide))
	}
	cmd := &exec.Cmd{
		Path:       bin,
		Args:       args,
		Env:        env,
		Stdout:     s.Stdout,
		Stderr:     s.Stderr, // a supervisor's crash shows in the run's output
		ExtraFiles: []*os.File{ctrlR, repW},
		// A group of its own: a terminal's ^C or ^Z, or a signal to
		// snip-jobs's group, does not reach it.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	err = cmd.Start()
	ctrlR.Close() // the supervisor's ends now; EOF comes when the process ends
	repW.Close()
	if err != nil {
		ctrlW.Close()
		repR.Close()
		return nil, nil, fmt.Errorf("supervisor: start %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, ctrl: ctrlW, enc: json.NewEncoder(ctrlW), acks: map[uint64]chan ack{},
		ready: make(chan struct{}), started: make(chan struct{}), done: make(chan struct{}), res: Result{Code: -1}}
	return p, repR, nil
}

// follow reads the supervisor's reports until it exits, then closes done.
func (p *Process) follow(rep *os.File) {
	dec := json.NewDecoder(rep)
	proven := false
	for {
		var r report
		if err := dec.Decode(&r); err != nil {
			break
		}
		switch {
		case r.Ready:
			close(p.ready)
		case r.PID != 0:
			p.pid = r.PID
			close(p.started)
		case r.StartErr != nil:
			p.startErr = &StartError{Path: p.path, Err: r.StartErr.err()}
			close(p.started)
		case r.Ack != nil:
			p.answer(*r.Ack)
		case r.Exit != nil:
			p.res.Code, p.res.Signal = r.Exit.Code, syscall.Signal(r.Exit.Signal)
		case r.Gone != nil:
			proven = true
			p.res.Ended, p.res.Terminated, p.res.Killed = r.Gone.Ended, r.Gone.Terminated, r.Gone.Killed
		}
	}
	rep.Close()
	err := p.cmd.Wait()
	switch {
	case proven || p.startErr != nil:
	case p.pid == 0:
		p.res.Err = fmt.Errorf("%w: it exited before reporting the program started (%v)", ErrUnproven, err)
	default:
		p.res.Err = fmt.Errorf("%w (%v)", ErrUnproven, err)
	}
	p.closeControl()
	for _, c := range []chan struct{}{p.ready, p.started} {
		select {
		case <-c:
		default:
			close(c)
		}
	}
	close(p.done)
}

func (f *startFailure) err() error {
	switch {
	case f.Late:
		return ErrNoTimeLeft
	case f.Errno != 0:
		return syscall.Errno(f.Errno)
	default:
		return errors.New(f.Message)
	}
}

// PID is the program's process ID.
func (p *Process) PID() int { return p.pid }

// Done is closed once the supervisor has exited: after proving every process
// of the tree gone, unless Result().Err says otherwise.
func (p *Process) Done() <-chan struct{} { return p.done }

// Result is the run's outcome; call it after Done is closed.
func (p *Process) Result() Result {
	<-p.done
	return p.res
}

// Extend moves the deadline to a new CLOCK_BOOTTIME instant, later or
// earlier, and returns once the supervisor has it. Once the run is ending
// (Stop, the deadline's SIGTERM, the program's exit) the deadline moves only
// earlier: a later one returns ErrEnded, as does a run that is over.
//
// Call it on a renewal of the lease, with that renewal's deadline read on
// CLOCK_BOOTTIME (its send time there + TTL − margin). A term's deadline
// kept on the monotonic clock and converted later, as boottime.Now() +
// time.Until(d), carries a suspend's lost time into the supervisor: after a
// resume it would extend a term that expired meanwhile.
func (p *Process) Extend(ctx context.Context, deadline time.Duration) error {
	if deadline <= 0 {
		return errors.New("supervisor: a deadline must be a positive instant")
	}
	answer := make(chan ack, 1)
	p.wmu.Lock()
	p.seq++
	seq := p.seq
	p.amu.Lock()
	p.acks[seq] = answer
	p.amu.Unlock()
	err := p.writeLocked(command{Seq: seq, Deadline: deadline})
	p.wmu.Unlock()
	defer func() {
		p.amu.Lock()
		delete(p.acks, seq)
		p.amu.Unlock()
	}()
	if err != nil {
		return err
	}
	select {
	case a := <-answer:
		if !a.Applied {
			return ErrEnded
		}
		return nil
	case <-p.done:
		return ErrEnded
	case <-ctx.Done():
		return fmt.Errorf("supervisor: extend: %w", context.Cause(ctx))
	}
}

// Stop ends the run now: SIGTERM to the whole tree, SIGKILL after grace (at
// once when grace is 0, and never after the deadline). Done says when the
// tree is gone. A run that is over returns ErrEnded.
func (p *Process) Stop(grace time.Duration) error {
	return p.write(command{Stop: &grace})
}

func (p *Process) answer(a ack) {
	p.amu.Lock()
	defer p.amu.Unlock()
	if ch, ok := p.acks[a.Seq]; ok {
		ch <- a
	}
}

func (p *Process) write(v any) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.writeLocked(v)
}

// writeLocked sends one message: a line of well under the pipe's buffer,
// which the supervisor reads as it comes.
func (p *Process) writeLocked(v any) error {
	if p.enc == nil {
		return ErrEnded
	}
	if err := p.enc.Encode(v); err != nil {
		if errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EPIPE) {
			return ErrEnded
		}
		return fmt.Errorf("supervisor: %w", err)
	}
	return nil
}

// closeControl lets go of the control pipe: EOF for the supervisor.
func (p *Process) closeControl() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.enc != nil {
		p.ctrl.Close()
		p.enc = nil
	}
}
