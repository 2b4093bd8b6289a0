package chaos

import (
	"context"
	"errors"
	"fmt"
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

// claimLink is the latency, each way, of the probe leader's database link
// while a ManualRun fault waits to strike it: a claimed run then takes some
// fifteen round trips (its own connection, the fenced transaction, the
// completion), seconds in which the strike finds it in flight.
const claimLink = 150 * time.Millisecond

// manualRunOutcome is what one `snip-jobs run probe --wait` said.
type manualRunOutcome struct {
	out  string
	code int
	err  error
	id   int64
}

var manualRunID = regexp.MustCompile(`manual run (\d+)`)

// manualRun asks for runs of the probe with concurrent commands, striking
// the leader that claimed the request in two faults of three.
func (c *cluster) manualRun(ctx context.Context, rng *rand.Rand, f *Fault) error {
	fig := &ControlFigures{Strike: []string{"", "sigstop", "sigkill"}[rng.IntN(3)]}
	f.Controls, f.Job, f.Target = fig, JobProbe, JobProbe
	in, err := c.leaderOf(ctx, JobProbe)
	if err != nil {
		return err
	}
	var led map[string]int64
	if fig.Strike != "" {
		f.Target = in.name
		led = c.ledBy(in.name)
		f.Led = ledJobs(led)
		in.db.SetDelay(claimLink)
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
			o.out, o.code, o.err = c.operate(ctx, via, "run", "--by", fmt.Sprintf("snip-chaos-%d-%d", f.N, i), "--wait", "--timeout", "90s", JobProbe)
		})
	}
	if fig.Strike != "" {
		err = c.strikeClaimer(ctx, f, in, led, after)
	}
	wg.Wait()
	if f.Healed.IsZero() || f.Healed.Before(f.Start) {
		f.Healed = time.Now()
	}
	return joinErrs(err, c.manualOutcomes(ctx, fig, outcomes))
}

// manualOutcomes reads what the commands said: each must have made or
// joined a request that ended done. It notes the requests and how long each
// took.
func (c *cluster) manualOutcomes(ctx context.Context, fig *ControlFigures, outcomes []manualRunOutcome) error {
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
			errs = append(errs, fmt.Errorf("snip-jobs run %s --wait (command %d): exit status %d (%v): %s", JobProbe, i, o.code, o.err, strings.TrimSpace(o.out)))
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
// claimed, and, if in claimed it with the token it led the probe with,
// strikes it while the run is in flight: SIGSTOP for TTL + 1.5 s, or
// SIGKILL, the death reclaim and a restart once its jobs have new terms. A
// run over before it was seen claimed, or claimed by another term (the
// probe moved meanwhile: a spread hand-over), is not struck (Strike
// "missed").
func (c *cluster) strikeClaimer(ctx context.Context, f *Fault, in *instance, led map[string]int64, after int64) error {
	fig := f.Controls
	cl, err := c.waitClaim(ctx, after)
	switch {
	case err != nil:
		return err
	case cl.state != "running" || cl.instance != in.name || cl.token != led[JobProbe]:
		fig.Strike, f.Led, f.Target = "missed", nil, JobProbe
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
	state, instance string
	token           int64
}

// waitClaim waits until the first request of the probe after `after` has
// been claimed (running) or is over, and returns its state and claimer.
func (c *cluster) waitClaim(ctx context.Context, after int64) (claim, error) {
	ctx, cancel := context.WithTimeout(ctx, readyBound)
	defer cancel()
	for {
		var cl claim
		err := c.pool.QueryRow(ctx, `SELECT state, coalesce(instance, ''), coalesce(token, 0) FROM manual_runs
			WHERE job = $1 AND id > $2 ORDER BY id LIMIT 1`, JobProbe, after).Scan(&cl.state, &cl.instance, &cl.token)
		if err == nil && cl.state != "pending" {
			return cl, nil
		}
		if !sleep.For(ctx, 2*time.Millisecond) {
			return cl, fmt.Errorf("no manual run of the probe claimed within %v of its request", readyBound)
		}
	}
}
