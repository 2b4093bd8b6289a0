package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
)

// Options configures a run.
type Options struct {
	// Faults is how many faults to inject. The first len(Kinds) are every kind
	// once, in random order; the rest are drawn at random.
	Faults int
	// Kinds are the kinds to draw from (default Backend.Kinds()).
	Kinds []Kind
	// Backend is the leadership store the instances run on (default
	// BackendEtcd).
	Backend Backend `json:",omitempty"`
	// Seed makes the draws repeatable (0: from the clock).
	Seed uint64
	// TTL of the instances' leases (default 2 s, etcd's practical minimum);
	// the margin is TTL/4, keep-alives every TTL/5.
	TTL time.Duration
	// DefaultTiming leaves the margin and the renew interval to snip-jobs'
	// defaults for the TTL (leadership.TimingDefaults) instead.
	DefaultTiming bool
	// Broken builds snip-jobs with brokenPatches (go build -overlay): stop-early margin
	// zero and the fence check disabled. The checker must then report
	// violations.
	Broken bool
	// BrokenManual builds snip-jobs with brokenManualPatches: the weekly
	// report's manual run completed by the scheduler after the run, apart
	// from its effect (at least once). InvManualEffect must then be violated
	// by a claimer struck after the effect.
	BrokenManual bool `json:",omitempty"`
	// ManualJobs are the jobs ManualRun faults ask runs of, one drawn per
	// fault (default: the probe, the weekly report and the renewer).
	ManualJobs []string `json:",omitempty"`
	// ManualAfterEffect makes every ManualRun fault strike the claimer once
	// its run's effect committed (SIGSTOP or SIGKILL), where a fault
	// otherwise draws no strike, one in flight, or one after the effect.
	ManualAfterEffect bool `json:",omitempty"`
	// StopAtViolation ends the fault loop at the first fault after which a
	// job (the probe or another) shows a write accepted out of token order
	// (for the broken build).
	StopAtViolation bool
	// AwaitReport makes the run, once the faults are over, wait (up to
	// reportBound) until the weekly report has stored a report, so that its
	// check has one to check: the job's first sweep only records the slot
	// then due as skipped, and a short run may end before the next slot.
	AwaitReport bool
	// Pause is the quiet time between one fault's settling and the next
	// fault (default 1 s).
	Pause time.Duration
	// WorkDir is where the run's folder is created (default the system's
	// temporary folder); KeepDir keeps it (logs, configs, etcd data), as
	// does a run of the build under test that finds a violation or an
	// overrun.
	WorkDir string
	KeepDir bool
	// EtcdBinary is an etcd server binary (etcd's own, of any version) to
	// run the members with; empty: this program's embedded etcd
	// (MemberMain, the etcd of this module's go.mod).
	EtcdBinary string
	// Binary is a snip-jobs binary built from this module for the
	// instances (empty: the run builds one). Not with Broken or
	// BrokenManual, which build their own. Several runs of one process can share one build.
	Binary string `json:"-"`
	// Log receives progress. Default: discard.
	Log *slog.Logger `json:"-"`

	// previous is the previous release's snip-jobs, which the instances
	// start with and which migrates the database first (Upgrade).
	previous string
}

// margin and renewInterval are the instances' timing.
func (o Options) margin() time.Duration {
	if o.DefaultTiming {
		_, m, _ := leadership.TimingDefaults(o.Backend.rules(), o.TTL, 0, 0)
		return m
	}
	return Margin(o.TTL)
}

func (o Options) renewInterval() time.Duration {
	if o.DefaultTiming {
		_, _, r := leadership.TimingDefaults(o.Backend.rules(), o.TTL, 0, 0)
		return r
	}
	return RenewInterval(o.TTL)
}

// Report is a run's outcome.
type Report struct {
	Options Options
	Seed    uint64
	// EtcdVersion is the members' etcd server version (etcd backend).
	EtcdVersion string
	// KubeVersion is the kube-apiserver's version (Kubernetes backend).
	KubeVersion string `json:",omitempty"`
	Jobs        []string
	Started     time.Time
	Duration    time.Duration
	Faults      []*Fault
	Violations  []Violation
	Probe       ProbeStats
	// Writes is, per job other than the probe, its logged writes (the rows
	// that carry its term's token: see loggedWrites), whose order and
	// ownership the checker checked.
	Writes  []WriteStats
	Counts  *CountStats // set by every run (nil in the JSON of runs before the aggregator was required)
	Reports ReportStats
	Certs   CertStats
	// Controls is what the checks of the operators' controls checked (nil
	// in the JSON of runs before they were checked).
	Controls *ControlStats `json:",omitempty"`
	Load     LoadStats
	// Upgrade is set by Upgrade.
	Upgrade *UpgradeStats `json:",omitempty"`
	// Overruns counts, per job, the runs still going after the grace period
	// that followed the end of their term (from the instances' logs): each
	// held that job's next campaign on its instance.
	Overruns map[string]int
	// OverrunLog is, for each overrun, its instance's lines about that job
	// and token from the overrun line to the end of the lead: what the
	// run's stop waited on.
	OverrunLog []string `json:",omitempty"`
}

// ProbeStats summarises the probe's accepted writes.
type ProbeStats struct {
	Writes     int
	Terms      int // distinct tokens among them
	Rejections int // fence_rejections rows (all jobs)
	TermsAll   int // terms etcd granted, all jobs
}

// WriteStats counts one job's logged writes.
type WriteStats struct {
	Job          string
	Writes       int // rows written
	Transactions int // committed transactions that wrote them
	Terms        int // distinct tokens among them
}

// CountStats compares click events with the aggregator's counts.
type CountStats struct {
	Valid, Invalid    int64 // committed events
	Counted, Rejected int64 // in link_counts, click_rejects
}

// ReportStats counts the weekly report's rows.
type ReportStats struct {
	Reports                            int
	SlotsDone, SlotsSkipped, SlotsOpen int
}

// CertStats counts certificates.
type CertStats struct {
	Stored, Domains int // certificates stored, domains with a current one
	Issued          int // by the CA
	DuplicateIssued int // issued beyond the first per domain (renewals included)
	WithoutAfter60s int // domains added over a minute before the end that have no current certificate
	Recovered       int // stored by a later term than the one the CA issued them to
	// Unstored names the domains the CA issued more certificates for than
	// were stored, with both counts (for reading the instances' logs).
	Unstored []string
}

// LoadStats is what the load generators did.
type LoadStats struct {
	ClickCommits int64 // events in transactions whose commit succeeded
	ClickFailed  int64 // transactions that failed (PostgreSQL restarting)
	Domains      int64
}

// Run builds snip-jobs, starts the cluster, injects the faults, stops
// everything and checks the invariants. An error means the run could not be
// done; violations are in the report.
func Run(ctx context.Context, o Options) (*Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	rep := &Report{Options: o, Seed: o.Seed, Started: time.Now()}
	c, err := startCluster(ctx, o)
	if err != nil {
		return nil, err
	}
	defer c.close()
	rep.Jobs, rep.EtcdVersion, rep.KubeVersion = c.jobs, c.etcdVersion, c.kubeVersion()
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	order := make([]Kind, 0, o.Faults)
	for _, i := range rng.Perm(len(o.Kinds)) {
		order = append(order, o.Kinds[i])
	}
	for len(order) < o.Faults {
		order = append(order, o.Kinds[rng.IntN(len(o.Kinds))])
	}
	order = order[:o.Faults]
	for i, k := range order {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		f := c.inject(ctx, rng, i+1, k)
		rep.Faults = append(rep.Faults, f)
		lg := o.Log.With("fault", i+1, "of", o.Faults, "kind", k, "target", f.Target)
		for _, t := range f.Takeovers {
			lg = lg.With(t.Job, fmt.Sprintf("%d→%d in %v", t.From, t.To, t.After.Round(time.Millisecond)))
		}
		if f.Err != "" {
			lg.Warn("fault done; the cluster did not recover", "err", f.Err)
		} else {
			lg.Info("fault done", "healed_after", f.Healed.Sub(f.Start).Round(time.Millisecond), "settled_after", f.Settled.Sub(f.Healed).Round(time.Millisecond))
		}
		if o.StopAtViolation {
			if n, err := outOfOrder(ctx, c); err == nil && n > 0 {
				o.Log.Warn("writes were accepted out of token order: stopping", "writes", n)
				break
			}
		}
		sleep.For(ctx, o.Pause)
	}
	return c.conclude(ctx, rep)
}

func (o Options) withDefaults() (Options, error) {
	if o.TTL == 0 {
		o.TTL = 2 * time.Second
	}
	if o.Backend == "" {
		o.Backend = BackendEtcd
	}
	if len(o.Kinds) == 0 {
		o.Kinds = o.Backend.Kinds()
	}
	if err := checkBackend(o.Backend, o.Kinds); err != nil {
		return o, err
	}
	for _, j := range o.ManualJobs {
		if !slices.Contains(manualJobs, j) {
			return o, fmt.Errorf("chaos: no manual runs of %q: the jobs asked are %s", j, strings.Join(manualJobs, ", "))
		}
	}
	if err := leadership.CheckTiming(o.Backend.rules(), o.TTL, o.margin(), o.renewInterval()); err != nil {
		return o, err
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.Pause == 0 {
		o.Pause = time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// conclude ends a run: it stops the load, lets the aggregator catch up, stops
// the instances, and checks every invariant over everything the resources
// accepted since the start.
func (c *cluster) conclude(ctx context.Context, rep *Report) (*Report, error) {
	o := c.opts
	// Quiesce: stop the load, let the aggregator catch up, stop the instances.
	c.load.stop()
	rep.Load = LoadStats{ClickCommits: c.load.clicks.Load(), ClickFailed: c.load.failed.Load(), Domains: c.load.domains.Load()}
	if err := c.waitCaughtUp(ctx); err != nil {
		rep.Violations = append(rep.Violations, Violation{Invariant: InvCounts, Detail: err.Error()})
	}
	if o.AwaitReport {
		if err := c.waitReport(ctx); err != nil {
			o.Log.Warn("no weekly report to check", "err", err)
		}
	}
	c.stopInstances()
	rep.Duration = time.Since(rep.Started)

	k := &checker{pool: c.pool, ttl: o.TTL, renew: o.renewInterval()}
	f, err := readFacts(ctx, c.pool, c.obs.log())
	if err != nil {
		return nil, err
	}
	k.checkWrites(f)
	if err := k.checkFenceTable(ctx, f); err != nil {
		return nil, err
	}
	counts, err := k.checkCounts(ctx)
	if err != nil {
		return nil, err
	}
	rep.Counts = &counts
	if rep.Reports, err = k.checkReports(ctx, f); err != nil {
		return nil, err
	}
	if rep.Certs, err = k.checkCerts(ctx, f, c.ca.Issued()); err != nil {
		return nil, err
	}
	k.checkQuorum(f, rep.Faults)
	controls := k.checkControls(f)
	rep.Controls = &controls
	k.checkRecords(f, c.upgradedAt(rep.Faults), f.asOf)
	if err := k.checkPrograms(c.scriptDir); err != nil {
		return nil, err
	}
	k.checkRecovery(rep.Faults)
	noActing(f.probe, rep.Faults)
	rep.Violations = append(rep.Violations, k.out...)
	tokens := map[int64]bool{}
	for _, r := range f.probe {
		tokens[r.Token] = true
	}
	rep.Probe = ProbeStats{Writes: len(f.probe), Terms: len(tokens), Rejections: f.rejections, TermsAll: len(f.terms)}
	rep.Writes = writeStats(f.writes)
	rep.Overruns, rep.OverrunLog = overruns(c.instances)
	termsEnded(c.instances, rep.Faults)
	if !o.Broken && !o.BrokenManual && (len(rep.Violations) > 0 || len(rep.Overruns) > 0) {
		c.opts.KeepDir = true // its instances' whole logs say more than the report
	}
	if c.opts.KeepDir {
		o.Log.Info("kept the run's folder", "dir", c.dir, "violations", len(rep.Violations), "overruns", len(rep.Overruns))
	}
	return rep, nil
}

// upgradedAt says when each instance began running the binary under test:
// in a rolling upgrade (Upgrade), when it was restarted with it (never, for
// one that was not); otherwise from the start (no entry).
func (c *cluster) upgradedAt(faults []*Fault) map[string]time.Time {
	at := map[string]time.Time{}
	if c.opts.previous == "" {
		return at
	}
	for _, in := range c.instances {
		at[in.name] = time.Now().Add(time.Hour)
	}
	for _, f := range faults {
		if f.Kind == UpgradeRestart {
			at[f.Target] = f.Start
		}
	}
	return at
}

// outOfOrder counts the writes (probe rows, and the other jobs' logged
// writes) committed after a write of the same job with a higher token.
func outOfOrder(ctx context.Context, c *cluster) (int, error) {
	var n int
	err := c.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT token, max(token) OVER (ORDER BY commit_seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
		FROM chaos_probe WHERE commit_seq IS NOT NULL
		UNION ALL
		SELECT token, max(token) OVER (PARTITION BY job ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
		FROM chaos_writes) w WHERE token < before`).Scan(&n)
	return n, err
}

// writeStats summarises the logged writes per job.
func writeStats(ws []jobWrite) []WriteStats {
	by := map[string]*WriteStats{}
	txs, tokens := map[string]bool{}, map[string]bool{}
	for _, w := range ws {
		s := by[w.Job]
		if s == nil {
			s = &WriteStats{Job: w.Job}
			by[w.Job] = s
		}
		s.Writes++
		if !txs[w.Xact] {
			txs[w.Xact] = true
			s.Transactions++
		}
		if k := fmt.Sprint(w.Job, " ", w.Token); !tokens[k] {
			tokens[k] = true
			s.Terms++
		}
	}
	out := make([]WriteStats, 0, len(by))
	for _, job := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[job])
	}
	return out
}

// waitCaughtUp waits until the aggregator has processed every committed event.
func (c *cluster) waitCaughtUp(ctx context.Context) error {
	bound := 2 * readyBound
	deadline := time.Now().Add(bound)
	for {
		var events, done int64
		err := c.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM chaos_clicks), (SELECT folded + rejected FROM click_aggregator_state)`).Scan(&events, &done)
		if err == nil && events == done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the aggregator did not catch up within %v: %d events committed, %d processed (%v)", bound, events, done, err)
		}
		if !sleep.For(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// reportBound is how long waitReport waits: a cron slot a minute, and the
// time to store its report.
const reportBound = 90 * time.Second

// waitReport waits until a weekly report is stored.
func (c *cluster) waitReport(ctx context.Context) error {
	deadline := time.Now().Add(reportBound)
	for {
		var n int
		err := c.pool.QueryRow(ctx, `SELECT count(*) FROM weekly_reports`).Scan(&n)
		if err == nil && n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("no weekly report read within %v of the last fault: %w", reportBound, err)
			}
			return fmt.Errorf("no weekly report stored within %v of the last fault", reportBound)
		}
		if !sleep.For(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}
