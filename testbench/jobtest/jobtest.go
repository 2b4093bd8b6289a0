// Package jobtest runs snip-jobs instances inside a test process, on a real etcd
// member and a real PostgreSQL database, so that tests of the scheduler and of
// job types can kill, stop and start "servers" and check what the database
// accepted. Nothing here is a mock: each instance has its own etcd client,
// leadership session, connection pool and scheduler.
package jobtest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// Patience bounds waits for things that must happen (benchtest.Patience).
const Patience = benchtest.Patience

// Cluster is a real etcd member and a migrated PostgreSQL database shared by the
// instances a test starts. The instances connect as the runtime role of
// docs/operations.md (dbtest.NewDB), with only the grants the service needs;
// the test's own view connects as the schema's owner. The test's package needs
// func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }.
type Cluster struct {
	T          *testing.T
	Etcd       *etcdtest.Cluster
	URL        string           // database URL as the schema's owner: the test's fixtures and checks
	RuntimeURL string           // database URL as the runtime role: what the instances use
	DB         *pgxpool.Pool    // the test's own view of the database
	Obs        *clientv3.Client // the test's own etcd client
	Prefix     string
	// TTL of the instances' leases (default 2 s; margin a quarter of it).
	TTL time.Duration
}

// NewCluster starts etcd and a fresh database with every migration applied.
func NewCluster(t *testing.T) *Cluster {
	t.Helper()
	db := dbtest.NewDB(t)
	c := &Cluster{T: t, Etcd: etcdtest.Start(t, 1), URL: db.Owner, RuntimeURL: db.Runtime, TTL: 2 * time.Second,
		Prefix: "/test/" + strings.ReplaceAll(t.Name(), "/", "-")}
	c.DB = c.Pool()
	c.Obs = c.Etcd.Client(t)
	return c
}

// Pool opens a new pool on the database as the schema's owner, closed at the
// end of the test.
func (c *Cluster) Pool() *pgxpool.Pool {
	c.T.Helper()
	return dbtest.Pool(c.T, c.URL)
}

// RuntimePool opens a new pool on the database as the runtime role, closed at
// the end of the test: what an instance connects with.
func (c *Cluster) RuntimePool() *pgxpool.Pool {
	c.T.Helper()
	return dbtest.Pool(c.T, c.RuntimeURL)
}

// Node is one snip-jobs instance running in the test process.
type Node struct {
	Name    string
	Session *leadership.Session // nil when no job needs etcd
	Sched   *scheduler.Scheduler
	Metrics *prometheus.Registry
	cli     *clientv3.Client
	pool    *pgxpool.Pool
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once
	c       *Cluster
}

// Option adjusts an instance's configuration.
type Option func(*configs.File, *leadership.Config)

// WithTTL sets the instance's lease TTL (margin 3/10 of it).
func WithTTL(ttl time.Duration) Option {
	return func(_ *configs.File, c *leadership.Config) { c.TTL, c.Margin = ttl, ttl*3/10 }
}

// Start runs an instance named name with the given jobs.
func (c *Cluster) Start(name string, reg *scheduler.Registry, jobs []configs.Job, opts ...Option) *Node {
	c.T.Helper()
	file := &configs.File{Instance: name, Jobs: jobs}
	lc := leadership.Config{Instance: name, TTL: c.TTL, Margin: c.TTL / 4, Logger: benchtest.Logger(c.T)}
	for _, o := range opts {
		o(file, &lc)
	}
	n := &Node{c: c, Name: name, Metrics: prometheus.NewRegistry(), done: make(chan struct{})}
	if needsEtcd(jobs) {
		n.cli = c.Etcd.Client(c.T)
		s, err := etcdlease.NewSession(etcdlease.Config{Client: n.cli, Prefix: c.Prefix, Config: lc})
		if err != nil {
			c.T.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), Patience)
		defer cancel()
		if err := s.WaitReady(ctx); err != nil {
			c.T.Fatal(err)
		}
		n.Session = s
	}
	n.pool = c.RuntimePool()
	var session scheduler.Session
	if n.Session != nil {
		session = scheduler.Over(n.Session)
	}
	sched, err := scheduler.New(scheduler.Config{File: file, Registry: reg, Session: session, Pool: n.pool,
		Log: benchtest.Logger(c.T), Metrics: n.Metrics})
	if err != nil {
		c.T.Fatal(err)
	}
	n.Sched = sched
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() {
		defer close(n.done)
		_ = sched.Run(ctx)
	}()
	c.T.Cleanup(n.Stop)
	return n
}

func needsEtcd(jobs []configs.Job) bool {
	for _, j := range jobs {
		if j.Singleton && !(j.Schedule.Kind == configs.Cron && j.Schedule.Coordination == configs.Database) {
			return true
		}
	}
	return false
}

// Stop shuts the instance down as SIGTERM does: jobs cancelled, terms
// resigned, lease revoked.
func (n *Node) Stop() {
	n.once.Do(func() {
		n.cancel()
		<-n.done
		if n.Session != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = n.Session.Close(ctx)
		}
	})
}

// Crash stops the instance the way SIGKILL looks from outside: its etcd and
// database traffic stops at once (no resign, revoke or last write gets out)
// and its jobs stop.
func (n *Node) Crash() {
	n.once.Do(func() {
		if n.cli != nil {
			_ = n.cli.Close()
		}
		// Refuse new database work at once; Close itself waits for connections
		// in use, which the cancelled jobs give back.
		closed := make(chan struct{})
		go func() { n.pool.Close(); close(closed) }()
		for n.pool.Ping(context.Background()) == nil {
			time.Sleep(time.Millisecond)
		}
		n.cancel()
		<-n.done
		<-closed
	})
}

// Leader is the job's current leader as etcd sees it.
func (c *Cluster) Leader(job string) (etcdlease.Leader, bool) {
	c.T.Helper()
	l, ok, err := etcdlease.NewCluster(c.Obs, c.Prefix).LeaderKey(context.Background(), job)
	if err != nil {
		c.T.Fatal(err)
	}
	return l, ok
}

// Grid fires on every multiple of its duration since the zero time: slots are
// the same instants whoever computes them, like a cron spec's, but seconds apart.
type Grid time.Duration

// Next implements cron.Schedule.
func (g Grid) Next(t time.Time) time.Time {
	d := time.Duration(g)
	return t.Truncate(d).Add(d)
}

// Continuous is a continuous singleton job entry.
func Continuous(name, typ string) configs.Job {
	return configs.Job{Name: name, Type: typ, Singleton: true, Grace: 2 * time.Second,
		Schedule: configs.Schedule{Kind: configs.Continuous}}
}

// CronJob is a singleton cron job entry firing every `every` on a Grid, read in loc.
func CronJob(name, typ string, every time.Duration, loc *time.Location, coord configs.Coordination, policy configs.CatchUpPolicy) configs.Job {
	return configs.Job{Name: name, Type: typ, Singleton: true, Grace: 2 * time.Second,
		Schedule: configs.Schedule{Kind: configs.Cron, Cron: "grid " + every.String(), Spec: Grid(every),
			Location: loc, Coordination: coord, CatchUp: policy, CatchUpWindow: time.Hour}}
}

// Registry builds a registry or fails the test.
func Registry(t *testing.T, types ...scheduler.Type) *scheduler.Registry {
	t.Helper()
	r, err := scheduler.NewRegistry(types...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Eventually polls cond until it holds (benchtest.Eventually).
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	benchtest.Eventually(t, what, cond)
}

// WaitCommit waits until cond holds, woken by each commit that changes one
// of tables (dbtest.WaitCommit): the database signals a slot claimed or a
// pass recorded, the test does not poll.
func (c *Cluster) WaitCommit(what string, tables []string, cond func() bool) {
	c.T.Helper()
	dbtest.WaitCommit(c.T, c.URL, what, tables, cond)
}

// WaitKeys waits until cond holds, woken by each change under the
// cluster's prefix (etcdtest.WaitKeys: an etcd watch), for a term won or ended.
func (c *Cluster) WaitKeys(what string, cond func() bool) {
	c.T.Helper()
	etcdtest.WaitKeys(c.T, c.Obs, c.Prefix+"/", what, cond)
}

// MetricSum adds up every series of a metric family on a node's registry;
// given label/value pairs, only the series that carry all of them.
func (n *Node) MetricSum(t *testing.T, name string, labelPairs ...string) float64 {
	t.Helper()
	return MetricSum(t, n.Metrics, name, labelPairs...)
}

// MetricSum is Node.MetricSum on any registry.
func MetricSum(t *testing.T, reg prometheus.Gatherer, name string, labelPairs ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labelPairs) {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	want := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		want[pairs[i]] = pairs[i+1]
	}
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			delete(want, l.GetName())
		}
	}
	return len(want) == 0
}

// Options is v (a job type's options value, all of it) as a job's options, as
// if a config file had written them: the job's type decodes and checks them.
func Options(t testing.TB, v any) configs.Options {
	t.Helper()
	o, err := configs.EncodeOptions(v)
	if err != nil {
		t.Fatalf("job options: %v", err)
	}
	return o
}

// WaitNodes waits until cond holds, woken by each change in the schedulers
// (Scheduler.Changed: a term begun or ended, a run started or finished) and
// the sessions (Session.StatsChanged: a campaign waiting, a lease renewed) of
// nodes, not by polling.
func (c *Cluster) WaitNodes(what string, nodes []*Node, cond func() bool) {
	c.T.Helper()
	benchtest.WaitChange(c.T, what, func() <-chan struct{} {
		var chans []<-chan struct{}
		for _, n := range nodes {
			chans = append(chans, n.Sched.Changed())
			if n.Session != nil {
				chans = append(chans, n.Session.StatsChanged())
			}
		}
		return benchtest.AnyOf(chans...)
	}, cond)
}

// Wait is WaitNodes for this node alone.
func (n *Node) Wait(what string, cond func() bool) {
	n.c.T.Helper()
	n.c.WaitNodes(what, []*Node{n}, cond)
}
