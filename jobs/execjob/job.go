package execjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/boottime"
	"github.com/snip/snip-jobs/internal/command"
	"github.com/snip/snip-jobs/jobs/execjob/supervisor"
	"github.com/snip/snip-jobs/scheduler"
)

// Type runs an operator's program per run: any periodic script, behind the
// singleton gate (see the package comment).
func Type() scheduler.Type {
	return scheduler.Type{
		Name: "exec",
		Doc:  "runs a program per run (a script, a binary), its whole process tree ended with its term; the fencing token in its environment",
		Options: func(spec configs.Job) (configs.Checked, error) {
			return configs.OptionsOf(defaults(spec))(spec)
		},
		New: newJob,
	}
}

func newJob(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
	if !spec.Options.Present() {
		return nil, errors.New("exec: options missing (command is required)")
	}
	o, err := configs.DecodeOptions(spec, defaults(spec))
	if err != nil {
		return nil, err
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(env.Metrics, spec.Name)
	if err != nil {
		return nil, fmt.Errorf("exec %q: metrics: %w", spec.Name, err)
	}
	var password string
	if env.Pool != nil {
		password = env.Pool.Config().ConnConfig.Password
	}
	redact := command.NewRedactor(append(command.DatabaseSecrets(password), command.EnvironmentSecrets(os.Environ())...))
	j := &job{opts: o, redact: redact, m: m, settled: closed(), name: spec.Name, instance: env.Instance}
	for name, value := range o.Env {
		j.env = append(j.env, name+"="+value)
	}
	j.hide = command.Unreadable(log, "exec: the program", env.Secrets)
	log.Info("exec configured", "command", redact.Args(o.Command), "dir", o.Dir, "kill_grace", o.KillGrace, "timeout", o.Timeout,
		"hidden_files", j.hide)
	j.refill(log)
	return j, nil
}

// job is one exec job of the config.
type job struct {
	name, instance string
	opts           Options
	env            []string // options.env, as NAME=value
	hide           []string // the service's secret files, unreadable to the program (nil: none, or no Landlock)
	redact         *command.Redactor
	m              *metrics

	mu      sync.Mutex
	live    int           // programs whose tree is not proven gone
	settled chan struct{} // closed while live == 0
	spare   *spare        // a supervisor ready for the next run (nil: none yet)
}

// spare is a supervisor started ahead of a run, with the read ends of the
// output pipes it holds the write ends of.
type spare struct {
	sp       *supervisor.Spare
	out, err *os.File
}

// newSpare starts a supervisor for the next run: a run then waits for no
// process's start but its program's (a supervisor is the snip-jobs binary,
// ~15 ms to start). Each exec job keeps one on each instance.
func (j *job) newSpare() (*spare, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	sp, err := supervisor.Prepare(supervisor.Spec{Stdout: outW, Stderr: errW, Instance: j.instance, Label: "job " + j.name, Hide: j.hide})
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	return &spare{sp: sp, out: outR, err: errR}, nil
}

// takeSpare takes the ready supervisor, or starts one.
func (j *job) takeSpare() (*spare, error) {
	j.mu.Lock()
	s := j.spare
	j.spare = nil
	j.mu.Unlock()
	if s != nil {
		return s, nil
	}
	return j.newSpare()
}

// refill starts the next run's supervisor in the background, unless one is
// ready.
func (j *job) refill(log *slog.Logger) {
	go func() {
		j.mu.Lock()
		ready := j.spare != nil
		j.mu.Unlock()
		if ready {
			return
		}
		s, err := j.newSpare()
		if err != nil {
			log.Warn("exec: cannot start a supervisor ahead of the next run; the run starts one", "err", err)
			return
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.spare != nil { // another refill was quicker
			go func() { s.sp.Close(); s.out.Close(); s.err.Close() }()
			return
		}
		j.spare = s
	}()
}

// Settled is closed once no program of this job is alive on this instance
// (scheduler.Settler): no term of the job begins here before.
func (j *job) Settled() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.settled
}

// started and gone count the live programs.
func (j *job) started() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.live == 0 {
		j.settled = make(chan struct{})
	}
	j.live++
	j.m.running.Inc()
}

func (j *job) gone() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.live--
	j.m.running.Dec()
	if j.live == 0 {
		close(j.settled)
	}
}

func closed() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Run runs the program once, under its supervisor, until it exits or the
// run must stop (its context ends: the term's end, a pause, shutdown; or its
// timeout), then stops its whole tree and returns once every process of it
// is proven gone.
func (j *job) Run(ctx context.Context, r *scheduler.Run) error {
	log := r.Log.With("run", r.ID())
	began := time.Now()
	termDeadline := r.Deadline()
	s, err := j.takeSpare()
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	p, err := s.sp.Start(ctx, supervisor.Spec{
		Path: j.opts.Command[0], Args: j.opts.Command[1:], Dir: j.opts.Dir,
		Env:      command.Env(j.redact, nil, append(j.env, contractEnv(r, termDeadline)...)...),
		Deadline: j.bootDeadline(termDeadline, began),
	})
	j.refill(log)
	if err != nil {
		s.out.Close()
		s.err.Close()
		return fmt.Errorf("exec: %w", err)
	}
	j.started()
	defer j.gone()
	log = log.With("pid", p.PID())
	log.Info("program started", "command", j.redact.Args(j.opts.Command))
	r.RecordProcess(ctx, p.PID())
	out := newOutput(log, j.redact, func(n int) { j.m.dropped.Add(float64(n)) })
	var copying sync.WaitGroup
	copying.Go(func() { out.copy(s.out, "stdout"); s.out.Close() })
	copying.Go(func() { out.copy(s.err, "stderr"); s.err.Close() })
	stopSent, stopped := j.supervise(ctx, r, p, began)
	gone := time.Now()
	copying.Wait()
	out.close()
	if stopped != nil {
		// How long each phase of the stop took, for a stop slower than its grace.
		log = log.With("stop_to_gone", gone.Sub(stopSent).Round(time.Millisecond), "gone_to_output_closed", time.Since(gone).Round(time.Millisecond))
	}
	return j.outcome(log, p.Result(), stopped, began, out.last())
}

// supervise keeps the supervisor's deadline on the term's (it moves with
// each renewal) until the tree is gone, stopping it when ctx ends or the
// timeout passes. It returns when it sent the stop, and why it stopped it
// (nil: it ended on its own).
func (j *job) supervise(ctx context.Context, r *scheduler.Run, p *supervisor.Process, began time.Time) (sent time.Time, why error) {
	var timeout <-chan time.Time
	if j.opts.Timeout != nil {
		t := time.NewTimer(time.Until(began.Add(*j.opts.Timeout)))
		defer t.Stop()
		timeout = t.C
	}
	tick := time.NewTicker(deadlineTick)
	defer tick.Stop()
	deadline := r.Deadline()
	stop := func(err error) {
		if why == nil {
			why, sent = err, time.Now()
			r.Log.Info("stopping the program", "run", r.ID(), "pid", p.PID(), "why", err, "kill_grace", j.opts.KillGrace)
			if err := p.Stop(j.opts.KillGrace); err != nil {
				r.Log.Warn("cannot tell the supervisor to stop the program; it kills the tree at the term's deadline", "run", r.ID(), "pid", p.PID(), "err", err)
			}
		}
	}
	ended := ctx.Done() // nil once acted on: a closed channel would spin the loop until the tree is gone
	for {
		select {
		case <-p.Done():
			return sent, why
		case <-ended:
			ended = nil
			stop(context.Cause(ctx))
		case <-timeout:
			stop(fmt.Errorf("%w after %v", scheduler.ErrTimedOut, *j.opts.Timeout))
		case <-tick.C:
			if d := r.Deadline(); !d.Equal(deadline) && why == nil {
				deadline = d
				_ = p.Extend(ctx, j.bootDeadline(d, began))
			}
		}
	}
}

// deadlineTick is how often a run's supervisor is told of its term's
// renewed deadline: far more often than a lease is renewed.
const deadlineTick = 100 * time.Millisecond

// bootDeadline is the supervisor's deadline, on CLOCK_BOOTTIME: the term's
// deadline (zero: none), and, past the timeout, kill_grace later (a
// backstop: snip-jobs stops a run at its timeout itself, unless it is
// frozen). 0: none.
func (j *job) bootDeadline(term, began time.Time) time.Duration {
	var at time.Time
	if !term.IsZero() {
		at = term
	}
	if j.opts.Timeout != nil {
		if t := began.Add(*j.opts.Timeout + j.opts.KillGrace); at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if at.IsZero() {
		return 0
	}
	return boottime.Now() + time.Until(at)
}

// outcome is the run's error from how the program ended.
func (j *job) outcome(log *slog.Logger, res supervisor.Result, stopped error, began time.Time, tail []string) error {
	took := time.Since(began).Round(time.Millisecond)
	j.m.killed.Add(float64(res.Terminated + res.Killed))
	switch {
	case res.Err != nil:
		return fmt.Errorf("exec: %w", res.Err)
	case stopped != nil:
		// ended is the supervisor's account: "deadline" when it had killed
		// the tree at the term's deadline before the stop reached it (snip-jobs
		// was frozen, and saw its term end only once it ran again).
		log.Info("program stopped", "why", stopped, "ended", res.Ended, "took", took, "terminated", res.Terminated, "killed", res.Killed)
		return fmt.Errorf("exec: stopped (%s): %w", exitStatus(res), stopped)
	case res.Ended == supervisor.Deadline:
		// snip-jobs did not stop it first: it was paused, or its clock
		// jumped (a suspended host).
		log.Warn("program killed by its supervisor at the term's deadline", "took", took, "killed", res.Killed)
		return fmt.Errorf("exec: killed at its term's deadline by its supervisor (%s): %w", exitStatus(res), scheduler.ErrTermEnded)
	case res.Code == 0:
		log.Info("program done", "took", took, "terminated", res.Terminated, "killed", res.Killed)
		return nil
	}
	err := &ExitError{Status: exitStatus(res), Tail: tail}
	log.Warn("program failed", "status", err.Status, "took", took)
	return err
}

// exitStatus says how the program ended, as exec.ExitError does.
func exitStatus(res supervisor.Result) string {
	switch {
	case res.Signal != 0:
		return "signal: " + res.Signal.String()
	case res.Code >= 0:
		return fmt.Sprintf("exit status %d", res.Code)
	}
	return "its end unseen"
}

// ExitError is a run whose program ended with a non-zero exit status or a
// signal: history shows it, with the last lines of its output.
type ExitError struct {
	Status string   // "exit status 3", "signal: killed"
	Tail   []string // the last lines of output, redacted
}

func (e *ExitError) Error() string {
	if len(e.Tail) == 0 {
		return "exec: " + e.Status
	}
	return "exec: " + e.Status + "; last output: " + strings.Join(e.Tail, " ⏎ ")
}
