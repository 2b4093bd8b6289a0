package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/testbench/childproc"
)

// The operators' controls, mixed into the faults: the commands an operator
// runs (`snip-jobs pause`, `resume`, `run`, `drain`, `undrain`), run by the
// harness with an instance's config, as on that server. What they must
// achieve is checked afterwards from PostgreSQL (InvPaused, InvManual,
// InvDrained: checkcontrols.go).
const (
	// OperatorPause pauses a drawn job (`snip-jobs pause`, which waits until
	// its leader's term has ended), holds it TTL + 1.5 s, asks for a run of
	// it (`snip-jobs run`, which must be refused), and resumes it
	// (`snip-jobs resume`; the weekly report sometimes with --catch-up).
	OperatorPause Kind = "operator-pause"
	// ManualRun asks for runs of a drawn job (the probe, the weekly report or
	// the renewer) with two to four concurrent `snip-jobs run JOB --wait`
	// (they join one request, or make another once it is over) and waits
	// until each is done. In two faults of three the job's leader is struck
	// (its database link slowed so that the run takes seconds): SIGSTOP for
	// TTL + 1.5 s, or SIGKILL with the death reclaim and a restart; in flight,
	// as soon as it has claimed the request (its successor runs the request
	// again), or once its run's effect committed (the request must then be
	// done: nothing to run again). The probe's rows name the request their
	// run executed, and the other jobs' effects are in their own tables, so
	// the checker sees how many times each ran.
	ManualRun Kind = "manual-run"
	// Drain drains the leader of a drawn job (`snip-jobs drain` on it, which
	// waits until it leads nothing), restarts it while drained in one fault of
	// two (the drain outlives the process), holds TTL + 1.5 s, and undrains
	// it.
	Drain Kind = "drain"
)

// ControlFigures is what an operator's control did in a fault of those kinds.
type ControlFigures struct {
	// Stopped is, for OperatorPause, from the pause's commit to its job's
	// leader key gone (the term ended "paused"); Resumed from the resume's
	// commit to the next term's key. The database's clock against the
	// observer's (one host, one clock).
	Stopped, Resumed time.Duration `json:",omitempty"`
	// Refused: a `snip-jobs run` of the paused job was refused, saying it
	// is paused (none is asked of the aggregator: continuous, it has no
	// extra run). CatchUp: resumed with --catch-up.
	Refused, CatchUp bool `json:",omitempty"`
	// Commands is how many `snip-jobs run` commands ManualRun ran at once,
	// Joined how many of them joined an open request, Requests the manual
	// runs they made or joined, Done how long each took from its request to
	// done (the database's clock).
	Commands, Joined int             `json:",omitempty"`
	Requests         []int64         `json:",omitempty"`
	Done             []time.Duration `json:",omitempty"`
	// Strike is how the job's leader was struck once it claimed the
	// request: sigstop, sigkill, or missed (the run was over before it was
	// seen claimed, or another term claimed it); "" when it was not struck.
	// StruckAt is when: in flight (as soon as the claim was seen; empty in
	// reports written before there was another moment) or after its effect.
	Strike   string `json:",omitempty"`
	StruckAt string `json:",omitempty"`
	// Restarted: the drained instance was restarted while drained.
	Restarted bool `json:",omitempty"`
}

// hold is how long a pause or a drain is held: as long as the leader faults.
func (c *cluster) hold() time.Duration { return c.opts.TTL + 1500*time.Millisecond }

// operate runs `snip-jobs args...` (the binary built for the run) with in's
// config, as an operator on that server does, against the database
// directly; flags first, the job's name last. It returns what the command
// printed and its exit status; the run's operators.log keeps both.
func (c *cluster) operate(ctx context.Context, in *instance, args ...string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	full := append([]string{args[0], "--config", in.config}, args[1:]...)
	began := time.Now()
	cmd := exec.CommandContext(ctx, c.binary, full...)
	cmd.Env = childproc.Env("SNIP_JOBS_DATABASE_URL=" + c.dbURL)
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code, err = ee.ExitCode(), nil
	case err != nil:
		code = -1
	}
	if lf, lerr := os.OpenFile(filepath.Join(c.dir, "operators.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); lerr == nil {
		fmt.Fprintf(lf, "%s $ snip-jobs %s\n%s(exit status %d after %v)\n", began.Format("15:04:05.000"), strings.Join(full, " "), out, code,
			time.Since(began).Round(time.Millisecond))
		lf.Close()
	}
	return string(out), code, err
}

// operateOK is operate for a command that must succeed.
func (c *cluster) operateOK(ctx context.Context, in *instance, args ...string) (string, error) {
	out, code, err := c.operate(ctx, in, args...)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	if err != nil {
		return out, fmt.Errorf("snip-jobs %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out))
	}
	return out, nil
}

// controlTimes reads the commit of the newest pause or drain of subject
// from the harness's log, and of its lift (zero: not lifted).
func (c *cluster) controlTimes(ctx context.Context, kind, subject string) (committed, lifted time.Time, err error) {
	var l *time.Time
	err = c.pool.QueryRow(ctx, `SELECT committed, lifted FROM chaos_controls WHERE kind = $1 AND subject = $2
		ORDER BY committed DESC LIMIT 1`, kind, subject).Scan(&committed, &l)
	if err != nil {
		return committed, lifted, fmt.Errorf("read the %s of %s from chaos_controls: %w", kind, subject, err)
	}
	if l != nil {
		lifted = *l
	}
	return committed, lifted, nil
}

// operatorPause pauses a drawn job, asks for a run of it (refused), and
// resumes it.
func (c *cluster) operatorPause(ctx context.Context, rng *rand.Rand, f *Fault) error {
	job := c.targetJob(rng)
	fig := &ControlFigures{}
	f.Controls, f.Job, f.Target = fig, job, job
	before := c.obs.leaders()[job]
	via := c.instances[rng.IntN(len(c.instances))]
	f.Start = time.Now()
	if _, err := c.operateOK(ctx, via, "pause", "--by", "snip-chaos", "--reason", fmt.Sprintf("fault %d", f.N), job); err != nil {
		return err
	}
	sleep.For(ctx, c.hold())
	var err error
	if !continuous(job) {
		out, code, rerr := c.operate(ctx, via, "run", "--by", "snip-chaos", job)
		fig.Refused = rerr == nil && code == 1 && strings.Contains(out, "is paused")
		if !fig.Refused {
			err = fmt.Errorf("snip-jobs run %s while it was paused: exit status %d (%v), not refused as paused: %s", job, code, rerr, strings.TrimSpace(out))
		}
	}
	resume := []string{"resume", "--by", "snip-chaos"}
	if job == JobReport && rng.IntN(2) == 0 {
		fig.CatchUp = true
		resume = append(resume, "--catch-up")
	}
	if _, rerr := c.operateOK(ctx, via, append(resume, job)...); rerr != nil {
		return joinErrs(err, rerr)
	}
	f.Healed = time.Now()
	committed, lifted, terr := c.controlTimes(ctx, "pause", job)
	if terr != nil {
		return joinErrs(err, terr)
	}
	if e, ok := c.obs.endOf(job, before.Token); ok {
		fig.Stopped = e.At.Sub(committed)
	}
	if !c.obs.waitFor(ctx, readyBound, func(ls map[string]leader) bool { _, ok := ls[job]; return ok }) {
		return joinErrs(err, fmt.Errorf("%s had no leader within %v of its resume", job, readyBound))
	}
	if e, ok := c.obs.firstStartAfter(job, lifted, before.Token); ok {
		fig.Resumed = e.At.Sub(lifted)
	}
	return err
}

// drain drains the leader of a drawn job, restarts it while drained in one
// fault of two, and undrains it.
func (c *cluster) drain(ctx context.Context, rng *rand.Rand, f *Fault) error {
	in, led, err := c.strikeLeader(ctx, rng, f)
	if err != nil {
		return err
	}
	fig := &ControlFigures{}
	f.Controls = fig
	if _, err := c.operateOK(ctx, in, "drain", "--by", "snip-chaos", "--reason", fmt.Sprintf("fault %d", f.N)); err != nil {
		return err
	}
	err = c.takeovers(ctx, f, led, 3*c.opts.TTL+10*time.Second)
	if committed, _, terr := c.controlTimes(ctx, "drain", in.name); terr == nil {
		shift := committed.Sub(f.Start) // count from the drain's commit, not the command's start
		for i := range f.Takeovers {
			f.Takeovers[i].After -= shift
			f.Takeovers[i].KeyGone -= shift
		}
	}
	if rng.IntN(2) == 0 {
		fig.Restarted = true
		err = joinErrs(err, c.restartDrained(ctx, f, in))
	}
	sleep.For(ctx, c.hold())
	_, uerr := c.operateOK(ctx, in, "undrain", "--by", "snip-chaos")
	f.Healed = time.Now()
	return joinErrs(err, uerr)
}

// restartDrained stops a drained instance with SIGTERM and starts it again:
// it must exit 0, and lead nothing once back (the drain outlives it).
func (c *cluster) restartDrained(ctx context.Context, f *Fault, in *instance) error {
	if err := in.signal(syscall.SIGTERM); err != nil {
		return err
	}
	var err error
	if !in.wait(30 * time.Second) {
		err = fmt.Errorf("%s did not exit within 30 s of SIGTERM", in.name)
	}
	if f.ExitCode = lastExit(in); f.ExitCode != 0 {
		err = joinErrs(err, fmt.Errorf("%s exited with status %d after SIGTERM while drained", in.name, f.ExitCode))
	}
	return joinErrs(err, c.restart(ctx, f, in))
}
