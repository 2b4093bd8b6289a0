package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// A soak runs the cluster of a run, under its load, for hours, with a light
// fault every few minutes, and samples what a leak would grow: each
// instance's resident memory, goroutines and open files (from its own
// /metrics), PostgreSQL's connections and the rows of the tables the product
// keeps bounded, and etcd's keys and leases. It fails on a trend (the least
// squares slope of the second half of a series, over that half, beyond the
// series' bound: see SoakBounds) or on any invariant of a run.

// SoakOptions configures a soak.
type SoakOptions struct {
	// Options are the cluster's (TTL, Seed, Binary, WorkDir, KeepDir, Log).
	// Faults and Kinds are ignored: the faults are SoakKinds, one every
	// FaultEvery.
	Options
	// Duration is how long the cluster runs under load.
	Duration time.Duration
	// FaultEvery is the time between faults (default 3 minutes).
	FaultEvery time.Duration
	// SampleEvery is the time between samples (default a minute, or
	// Duration/30 when that is shorter, at least 5 s).
	SampleEvery time.Duration
}

// SoakKinds are the light faults of a soak: none restarts an instance's
// process, so that what one process leaks over hours stays in its series.
var SoakKinds = []Kind{PauseLeader, PartitionLeader, EtcdMemberLoss, EtcdLeaderLoss, PostgresRestart}

// SoakTables are the product's tables whose rows a soak judges: each is kept
// bounded (the aggregator prunes processed clicks; the scheduler keeps the
// newest runs and slots of each job; fencing has a row per resource). The
// others are recorded but not judged: they grow with what the load adds
// (links, domains, certificates) or with the faults (terms).
var SoakTables = []string{"click_events", "job_runs", "cron_slots", "fencing_tokens"}

// Sample is what a soak read at one instant.
type Sample struct {
	At            time.Time
	Instances     map[string]ProcSample
	PGConnections int
	Rows          map[string]int64 // by table, SoakTables and the others
	EtcdKeys      int
	EtcdLeases    int
}

// ProcSample is one instance's process as its /metrics says.
type ProcSample struct {
	RSS        float64 // bytes
	Goroutines float64
	FDs        float64
}

// SoakReport is a soak's outcome: the run's report (invariants), the samples,
// and each series' trend.
type SoakReport struct {
	Run     *Report
	Options SoakOptions
	Samples []Sample
	Trends  []Trend
}

// Trend is one series' least-squares fit over the second half of a soak.
type Trend struct {
	Series      string
	First, Last float64 // the first and last samples
	Min, Max    float64
	// Change is the fitted change over the second half (slope × its span);
	// Bound the most it may be.
	Change, Bound float64
	Unit          string
}

// Failed reports whether the trend is beyond its bound.
func (t Trend) Failed() bool { return t.Change > t.Bound }

// SoakBounds are the trends a soak accepts: the fitted change over the second
// half may be at most Rate per hour of that half, and never less than Floor
// (what a healthy process's noise moves a series by in any window).
var SoakBounds = map[string]struct {
	Rate, Floor float64
	Unit        string
}{
	"rss":        {Rate: 4 << 20, Floor: 8 << 20, Unit: "bytes"},
	"goroutines": {Rate: 10, Floor: 30, Unit: ""},
	"fds":        {Rate: 5, Floor: 10, Unit: ""},
	"pg":         {Rate: 2, Floor: 15, Unit: "connections"},
	"rows":       {Rate: 100, Floor: 400, Unit: "rows"},
	"etcd":       {Rate: 2, Floor: 6, Unit: ""},
}

// Soak starts a cluster, runs it under load with a light fault every
// FaultEvery and a sample every SampleEvery until Duration has passed, then
// concludes as a run does and fits each series.
func Soak(ctx context.Context, o SoakOptions) (*SoakReport, error) {
	if o.Duration <= 0 {
		return nil, fmt.Errorf("chaos: a soak needs a duration")
	}
	if o.FaultEvery == 0 {
		o.FaultEvery = 3 * time.Minute
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = max(5*time.Second, min(time.Minute, o.Duration/30))
	}
	if o.Backend != "" && o.Backend != BackendEtcd {
		return nil, fmt.Errorf("chaos: a soak runs on the etcd backend only (its samples read etcd)")
	}
	o.Kinds = SoakKinds
	opts, err := o.Options.withDefaults()
	if err != nil {
		return nil, err
	}
	o.Options = opts
	rep := &SoakReport{Options: o, Run: &Report{Options: opts, Seed: opts.Seed, Started: time.Now()}}
	c, err := startCluster(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer c.close()
	rep.Run.Jobs, rep.Run.EtcdVersion = c.jobs, c.etcdVersion
	rng := rand.New(rand.NewPCG(opts.Seed, 0x50a4))
	end := time.Now().Add(o.Duration)
	nextFault, nextSample, n := time.Now().Add(o.FaultEvery), time.Now(), 0
	for time.Now().Before(end) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !time.Now().Before(nextSample) {
			s, err := c.sample(ctx)
			if err != nil {
				opts.Log.Warn("soak: a sample could not be read whole", "err", err)
			}
			rep.Samples = append(rep.Samples, s)
			nextSample = nextSample.Add(o.SampleEvery)
		}
		if !time.Now().Before(nextFault) {
			n++
			f := c.inject(ctx, rng, n, SoakKinds[rng.IntN(len(SoakKinds))])
			rep.Run.Faults = append(rep.Run.Faults, f)
			opts.Log.Info("soak: fault done", "fault", n, "kind", f.Kind, "target", f.Target, "err", f.Err,
				"left", time.Until(end).Round(time.Second))
			nextFault = time.Now().Add(o.FaultEvery)
		}
		sleep.For(ctx, max(0, min(time.Until(nextSample), time.Until(nextFault), time.Until(end))))
	}
	if s, err := c.sample(ctx); err == nil {
		rep.Samples = append(rep.Samples, s)
	}
	if rep.Run, err = c.conclude(ctx, rep.Run); err != nil {
		return nil, err
	}
	rep.Trends = trends(rep.Samples)
	return rep, nil
}

// Failed lists what failed the soak: invariants and trends beyond bounds.
func (r *SoakReport) Failed() []string {
	var out []string
	for _, v := range r.Run.Violations {
		out = append(out, fmt.Sprintf("%s: %s", v.Invariant, v.Detail))
	}
	for _, t := range r.Trends {
		if t.Failed() {
			out = append(out, fmt.Sprintf("%s grew by %s over the second half (bound %s)", t.Series, amount(t.Change, t.Unit), amount(t.Bound, t.Unit)))
		}
	}
	return out
}

// sample reads every series once. What cannot be read is left out and
// named in the error; the rest is returned.
func (c *cluster) sample(ctx context.Context) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s := Sample{At: time.Now(), Instances: map[string]ProcSample{}, Rows: map[string]int64{}}
	var errs []string
	for _, in := range c.instances {
		mctx, cancel := context.WithTimeout(ctx, 3*time.Second) // a paused instance does not answer
		m, err := benchtest.ScrapeMetrics(mctx, in.adminURL)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s's metrics: %v", in.name, err))
			continue
		}
		s.Instances[in.name] = ProcSample{RSS: m.Sum("process_resident_memory_bytes"),
			Goroutines: m.Sum("go_goroutines"), FDs: m.Sum("process_open_fds")}
	}
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&s.PGConnections); err != nil {
		errs = append(errs, "pg_stat_activity: "+err.Error())
	}
	rows, err := c.pool.Query(ctx, `SELECT relname FROM pg_stat_user_tables WHERE schemaname = 'public' AND relname NOT LIKE 'chaos%' AND relname NOT LIKE 'goose%'`)
	if err == nil {
		var tables []string
		for rows.Next() {
			var t string
			if rows.Scan(&t) == nil {
				tables = append(tables, t)
			}
		}
		rows.Close()
		for _, t := range tables {
			var n int64
			if err := c.pool.QueryRow(ctx, "SELECT count(*) FROM "+quoteIdent(t)).Scan(&n); err == nil {
				s.Rows[t] = n
			}
		}
	} else {
		errs = append(errs, "tables: "+err.Error())
	}
	if resp, err := c.etcd.cli.Get(ctx, Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		s.EtcdKeys = int(resp.Count)
	} else {
		errs = append(errs, "etcd keys: "+err.Error())
	}
	if resp, err := c.etcd.cli.Leases(ctx); err == nil {
		s.EtcdLeases = len(resp.Leases)
	} else {
		errs = append(errs, "etcd leases: "+err.Error())
	}
	if len(errs) > 0 {
		return s, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return s, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// trends fits every judged series.
func trends(samples []Sample) []Trend {
	type series struct {
		name, kind string
		value      func(Sample) (float64, bool)
	}
	var all []series
	for _, name := range instanceNames(samples) {
		for _, k := range []struct {
			kind string
			get  func(ProcSample) float64
		}{{"rss", func(p ProcSample) float64 { return p.RSS }}, {"goroutines", func(p ProcSample) float64 { return p.Goroutines }},
			{"fds", func(p ProcSample) float64 { return p.FDs }}} {
			all = append(all, series{name + " " + k.kind, k.kind, func(s Sample) (float64, bool) {
				p, ok := s.Instances[name]
				return k.get(p), ok
			}})
		}
	}
	all = append(all, series{"PostgreSQL connections", "pg", func(s Sample) (float64, bool) { return float64(s.PGConnections), true }})
	for _, t := range SoakTables {
		all = append(all, series{"rows of " + t, "rows", func(s Sample) (float64, bool) { n, ok := s.Rows[t]; return float64(n), ok }})
	}
	all = append(all, series{"etcd keys", "etcd", func(s Sample) (float64, bool) { return float64(s.EtcdKeys), true }},
		series{"etcd leases", "etcd", func(s Sample) (float64, bool) { return float64(s.EtcdLeases), true }})
	var out []Trend
	for _, se := range all {
		var ts, vs []float64
		for _, s := range samples {
			if v, ok := se.value(s); ok {
				ts, vs = append(ts, s.At.Sub(samples[0].At).Hours()), append(vs, v)
			}
		}
		if len(vs) < 2 {
			continue
		}
		b := SoakBounds[se.kind]
		half := len(vs) / 2
		slope := leastSquares(ts[half:], vs[half:])
		span := ts[len(ts)-1] - ts[half]
		t := Trend{Series: se.name, First: vs[0], Last: vs[len(vs)-1], Min: vs[0], Max: vs[0],
			Change: slope * span, Bound: max(b.Floor, b.Rate*span), Unit: b.Unit}
		for _, v := range vs {
			t.Min, t.Max = min(t.Min, v), max(t.Max, v)
		}
		out = append(out, t)
	}
	return out
}

func instanceNames(samples []Sample) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range samples {
		for name := range s.Instances {
			if !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// leastSquares is the slope of the least-squares line through (x, y).
func leastSquares(x, y []float64) float64 {
	n := float64(len(x))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// amount prints v in unit, bytes in MiB.
func amount(v float64, unit string) string {
	if unit == "bytes" {
		return strconv.FormatFloat(v/(1<<20), 'f', 1, 64) + " MiB"
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if unit != "" {
		s += " " + unit
	}
	return s
}

// Markdown is the soak's table: each series' first, last, range and fitted
// change over the second half, against its bound.
func (r *SoakReport) Markdown() string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "Soak of %v on %s: %d samples, %d faults (%s, one every %v), seed %d, etcd %s.\n\n",
		r.Run.Duration.Round(time.Second), host, len(r.Samples), len(r.Run.Faults), kindsList(SoakKinds), r.Options.FaultEvery, r.Run.Seed, r.Run.EtcdVersion)
	b.WriteString("| series | first | last | min | max | fitted change over the second half | bound | |\n|---|---|---|---|---|---|---|---|\n")
	for _, t := range r.Trends {
		verdict := "flat"
		if t.Failed() {
			verdict = "**grows**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", t.Series, amount(t.First, t.Unit), amount(t.Last, t.Unit),
			amount(t.Min, t.Unit), amount(t.Max, t.Unit), amount(t.Change, t.Unit), amount(t.Bound, t.Unit), verdict)
	}
	if failed := r.Failed(); len(failed) > 0 {
		b.WriteString("\nFailed:\n")
		for _, f := range failed {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	} else {
		b.WriteString("\nEvery series flat, every invariant held.\n")
	}
	return b.String()
}

func kindsList(ks []Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}
