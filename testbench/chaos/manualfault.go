package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/internal/sleep"
)

// claimLink is the latency, each way, of the claimer's database link while a
// ManualRun fault waits to strike it: a claimed run of the probe then takes
// some fifteen round trips (its own connection, the fenced transaction, the
// completion), the weekly report's some ten, seconds in which the strike
// finds it in flight; and the scheduler's completion of a run that did not
// complete its request itself (a fenced transaction after the run's end is
// recorded) takes a second, in which a strike after the effect finds it.
const claimLink = 150 * time.Millisecond

// renewerLink is claimLink for the renewer, whose pass makes some ten round
// trips for each domain it orders (and the load adds a domain every 4 s): at
// 150 ms each way, a pass with the backlog a strike leaves behind took
// minutes, and the request was not done within the commands' 90 s; at 50 ms
// a pass takes seconds, in which the strike still finds it in flight.
const renewerLink = 50 * time.Millisecond

func claimLinkOf(job string) time.Duration {
	if job == JobCerts {
		return renewerLink
	}
	return claimLink
}

// manualJobs are the jobs ManualRun asks runs of, one drawn per fault: the
// probe, whose rows name the request they ran, and the jobs whose effects
// InvManualEffect checks.
var manualJobs = []string{JobProbe, JobReport, JobCerts}

// Where a ManualRun fault strikes the claimer (ControlFigures.StruckAt).
const (
	struckInFlight = "in flight"        // as soon as its claim is seen: before its effect
	struckAfter    = "after its effect" // once its run's effect committed
)

// manualRunOutcome is what one `snip-jobs run JOB --wait` said.
type manualRunOutcome struct {
	out  string
	code int
	err  error
	id   int64
}

var manualRunID = regexp.MustCompile(`manual run (\d+)`)

// manualRun asks for runs of a drawn job with concurrent commands, striking
// the leader that claimed the request in two faults of three: as soon as it
// is seen claimed, or once its run's effect committed, one as likely as the
// other (Options.ManualAfterEffect: always the latter).
func (c *cluster) manualRun(ctx context.Context, rng *rand.Rand, f *Fault) error {
	jobs := c.opts.ManualJobs
	if len(jobs) == 0 {
		jobs = manualJobs
	}
	job := jobs[rng.IntN(len(jobs))]
	fig := &ControlFigures{Strike: []string{"", "sigstop", "sigkill"}[rng.IntN(3)]}
	switch {
	case c.opts.ManualAfterEffect:
		fig.Strike, fig.StruckAt = []string{"sigstop", "sigkill"}[rng.IntN(2)], struckAfter
	case fig.Strike != "":
		fig.StruckAt = []string{struckInFlight, struckAfter}[rng.IntN(2)]
	}
	f.Controls, f.Job, f.Target = fig, job, job
	c.waitSpread(ctx)
	in, err := c.leaderOf(ctx, job)
	if err != nil {
		return err
	}
	var led map[string]int64
	if fig.Strike != "" {
		f.Target = in.name
		led = c.ledBy(in.name)
		f.Led = ledJobs(led)
		in.db.SetDelay(claimLinkOf(job))
		defer in.db.SetDelay(0)
	}
	var after int64 // the newest request before these
	if err := c.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM manual_runs`).Scan(&after); err != nil {
		return fmt.Errorf("read manual_runs: %w", err)
	}
	f.Start = time.Now()
	fig.Commands = 2 + rng.IntN(3)
	outcomes := make([]manualRunOutcome, fig.Commands)
	var wg sync.WaitGroup
	for i := range fig.Commands {
		via, stagger := c.instances[i%len(c.instances)], time.Duration(rng.IntN(300))*time.Millisecond
		wg.Go(func() {
			sleep.For(ctx, stagger)
			o := &outcomes[i]
			o.out, o.code, o.err = c.operate(ctx, via, "run", "--by", fmt.Sprintf("snip-chaos-%d-%d", f.N, i), "--wait", "--timeout", "90s", job)
		})
	}
	if fig.Strike != "" {
		err = c.strikeClaimer(ctx, f, in, led, after)
	}
	wg.Wait()
	if f.Healed.IsZero() || f.Healed.Before(f.Start) {
		f.Healed = time.Now()
	}
	return joinErrs(err, c.manualOutcomes(ctx, job, fig, outcomes))
}

// waitSpread waits, up to spreadBound, until the jobs are spread over the
// instances as the scheduler's spread leaves them (each instance leads as
// many as another, give or take one) and no term has changed for a second,
// its period: a hand-over in progress (after a restart, or at the cluster's
// start) would move the job a ManualRun fault aims at between the leader it
// slows and the claim, and the strike would miss.
func (c *cluster) waitSpread(ctx context.Context) {
	even := func(ls map[string]leader) bool {
		n := map[string]int{}
		for _, in := range c.instances {
			n[in.name] = 0
		}
		for _, l := range ls {
			n[l.Instance]++
		}
		lo, hi := len(ls), 0
		for _, k := range n {
			lo, hi = min(lo, k), max(hi, k)
		}
		return len(ls) == len(c.jobs) && hi-lo <= 1
	}
	deadline := time.Now().Add(spreadBound)
	for time.Now().Before(deadline) && c.obs.waitFor(ctx, time.Until(deadline), even) {
		before := c.obs.leaders()
		if !sleep.For(ctx, time.Second) || maps.Equal(before, c.obs.leaders()) {
			return
		}
	}
}

// spreadBound bounds waitSpread: a fault goes ahead after it all the same.
const spreadBound = 15 * time.Second

// manualOutcomes reads what the commands said: each must have made or
// joined a request that ended done. It notes the requests and how long each
// took.
func (c *cluster) manualOutcomes(ctx context.Context, job string, fig *ControlFigures, outcomes []manualRunOutcome) error {
	var errs []error
	for i, o := range outcomes {
		if m := manualRunID.FindStringSubmatch(o.out); m != nil {
			o.id, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if strings.Contains(o.out, "joined manual run") {
			fig.Joined++
		}
		if o.id != 0 && !slices.Contains(fig.Requests, o.id) {
			fig.Requests = append(fig.Requests, o.id)
		}
		if o.err != nil || o.code != 0 || !strings.Contains(o.out, fmt.Sprintf("manual run %d done", o.id)) {
			errs = append(errs, fmt.Errorf("snip-jobs run %s --wait (command %d): exit status %d (%v): %s", job, i, o.code, o.err, strings.TrimSpace(o.out)))
		}
	}
	slices.Sort(fig.Requests)
	rows, err := c.pool.Query(ctx, `SELECT extract(epoch FROM finished_at - requested_at)::float8 FROM manual_runs
		WHERE id = ANY($1) AND finished_at IS NOT NULL ORDER BY id`, fig.Requests)
	var secs []float64
	if err == nil {
		secs, err = pgx.CollectRows(rows, pgx.RowTo[float64])
	}
	for _, s := range secs {
		fig.Done = append(fig.Done, time.Duration(s*float64(time.Second)))
	}
	return errors.Join(append(errs, err)...)
}

// strikeClaimer waits until the first of the requests after `after` is
// claimed, and, if in claimed it with the token it led the job with, strikes
// it in flight, or once its run's effect committed: SIGSTOP for TTL + 1.5 s,
// or SIGKILL, the death reclaim and a restart once its jobs have new terms.
// A run over before it was seen claimed, or claimed by another term (the job
// moved meanwhile: a spread hand-over), is not struck (Strike "missed").
func (c *cluster) strikeClaimer(ctx context.Context, f *Fault, in *instance, led map[string]int64, after int64) error {
	fig := f.Controls
	cl, err := c.waitClaim(ctx, f.Job, after)
	if err == nil && fig.StruckAt == struckAfter && cl.state == "running" {
		cl, err = c.waitEffect(ctx, f.Job, cl)
	}
	switch {
	case err != nil:
		return err
	case cl.instance != in.name || cl.token != led[f.Job] || cl.state != "running" && fig.StruckAt != struckAfter:
		fig.Strike, fig.StruckAt, f.Led, f.Target = "missed", "", nil, f.Job
		return nil
	}
	f.Start = time.Now()
	switch fig.Strike {
	case "sigstop":
		if err := in.signal(syscall.SIGSTOP); err != nil {
			return err
		}
		sleep.For(ctx, c.hold())
		in.db.SetDelay(0)
		if err := in.signal(syscall.SIGCONT); err != nil {
			return err
		}
		f.Healed = time.Now()
		return c.takeovers(ctx, f, led, 3*c.opts.TTL+10*time.Second)
	default:
		if err := in.signal(syscall.SIGKILL); err != nil {
			return err
		}
		in.wait(10 * time.Second)
		in.db.SetDelay(0)
		begin := time.Now()
		err = in.reclaim(ctx, "SERVICE_RESULT=signal", "EXIT_CODE=killed", "EXIT_STATUS=KILL")
		f.Reclaim = time.Since(begin)
		err = joinErrs(err, c.takeovers(ctx, f, led, 3*c.opts.TTL+10*time.Second))
		return joinErrs(err, c.restart(ctx, f, in))
	}
}

// claim is a manual run request's claim as the harness saw it.
type claim struct {
	id              int64
	state, instance string
	token           int64
}

// waitClaim waits until the first request of job after `after` has been
// claimed (running) or is over, and returns its state and claimer.
func (c *cluster) waitClaim(ctx context.Context, job string, after int64) (claim, error) {
	ctx, cancel := context.WithTimeout(ctx, readyBound)
	defer cancel()
	for {
		var cl claim
		err := c.pool.QueryRow(ctx, `SELECT id, state, coalesce(instance, ''), coalesce(token, 0) FROM manual_runs
			WHERE job = $1 AND id > $2 ORDER BY id LIMIT 1`, job, after).Scan(&cl.id, &cl.state, &cl.instance, &cl.token)
		if err == nil && cl.state != "pending" {
			return cl, nil
		}
		if !sleep.For(ctx, 2*time.Millisecond) {
			return cl, fmt.Errorf("no manual run of %s claimed within %v of its request", job, readyBound)
		}
	}
}

// waitEffect waits, after claim cl, until its run's effect has committed:
// the request is over (a run that completes it in its own transaction), or
// the run's end is recorded (a run that left its completion to the
// scheduler, which makes it after that record). It returns the request's
// claim then; one claimed by another term meanwhile is returned at once.
func (c *cluster) waitEffect(ctx context.Context, job string, cl claim) (claim, error) {
	ctx, cancel := context.WithTimeout(ctx, manualBound)
	defer cancel()
	for {
		now := cl
		var ended bool
		err := c.pool.QueryRow(ctx, `SELECT m.state, coalesce(m.instance, ''), coalesce(m.token, 0),
				EXISTS (SELECT FROM job_runs r WHERE r.job = m.job AND r.token = m.token AND r.trigger = 'manual'
					AND r.started_at >= m.started_at AND r.finished_at IS NOT NULL)
			FROM manual_runs m WHERE m.id = $1`, cl.id).Scan(&now.state, &now.instance, &now.token, &ended)
		if err == nil && (now.state != "running" || now.token != cl.token || ended) {
			return now, nil
		}
		if !sleep.For(ctx, 5*time.Millisecond) {
			return cl, fmt.Errorf("manual run %d of %s, claimed by %s (token %d), took no effect within %v", cl.id, job, cl.instance, cl.token, manualBound)
		}
	}
}

// manualBound bounds a manual run, as the commands' --timeout does.
const manualBound = 90 * time.Second
