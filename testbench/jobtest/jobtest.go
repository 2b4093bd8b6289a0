// Package jobtest runs snip-jobs instances inside a test process, on a real
// leadership backend — an etcd member, or a kube-apiserver's Leases — and a
// real PostgreSQL database, so that tests of the scheduler and of job types
// can kill, stop and start "servers" and check what the database accepted.
// Nothing here is a mock: each instance has its own backend client,
// leadership session, connection pool and scheduler. A test written against
// the leadership API (Cluster.Leader, Revoke, WaitKeys, the sessions'
// stats) runs on either backend (EachBackend).
package jobtest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// Patience bounds waits for things that must happen (benchtest.Patience).
const Patience = benchtest.Patience

// Backend is the leadership backend a cluster's instances run on.
type Backend string

// The backends.
const (
	// Etcd is one etcd member of the test's own (etcdtest.Start).
	Etcd Backend = "etcd"
	// Kubernetes is Leases in a namespace of the test's own on the test
	// binary's shared kube-apiserver (kubetest.Shared).
	Kubernetes Backend = "kubernetes"
)

// Backends are both, in the order EachBackend runs them.
var Backends = []Backend{Etcd, Kubernetes}

// EachBackend runs test as a parallel subtest on each backend, named after
// it: for behaviour every backend must show the same, through the same
// leadership API.
func EachBackend(t *testing.T, test func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range Backends {
		t.Run(string(b), func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// kubePrefix names the Lease set of a Kubernetes cluster (its own
// namespace keeps it apart from other tests').
const kubePrefix = "snip-test"

// Cluster is a leadership backend and a migrated PostgreSQL database shared
// by the instances a test starts. The instances connect as the runtime role of
// docs/operations.md (dbtest.NewDB), with only the grants the service needs;
// the test's own view connects as the schema's owner. The test's package needs
// func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }.
type Cluster struct {
	T          testing.TB
	Backend    Backend
	URL        string        // database URL as the schema's owner: the test's fixtures and checks
	RuntimeURL string        // database URL as the runtime role: what the instances use
	DB         *pgxpool.Pool // the test's own view of the database
	// Leadership is the backend as an operator's command sees it, from
	// outside any session: the test's own reads of leaders and registrations.
	Leadership leadership.Cluster
	// Prefix starts the backend's keys (etcd) or names its Lease set (Kubernetes).
	Prefix string
	// TTL of the instances' leases (DefaultTTL; margin a quarter of it).
	TTL time.Duration

	// The etcd backend's member and the test's own client of it (nil on Kubernetes).
	Etcd *etcdtest.Cluster
	Obs  *clientv3.Client
	// The Kubernetes backend's API server, the cluster's namespace on it, and
	// the test's own client of its Leases (nil on etcd).
	Kube      *kubetest.Server
	Namespace string
	Leases    coordclient.CoordinationV1Interface
}

// DefaultTTL is the instances' lease TTL unless a test sets another: long
// enough that a renewal delayed by a loaded machine (load 25, on both
// backends) does not end a term the test did not mean to end; a test about
// expiry waits for it to be seen, never for a time.
const DefaultTTL = 4 * time.Second

// NewCluster starts etcd and a fresh database with every migration applied.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	return NewClusterOn(t, Etcd)
}

// NewClusterOn is NewCluster on backend b: for Kubernetes, a namespace of the
// test's own on the shared kube-apiserver.
func NewClusterOn(t testing.TB, b Backend) *Cluster {
	t.Helper()
	db := dbtest.NewDB(t)
	c := &Cluster{T: t, Backend: b, URL: db.Owner, RuntimeURL: db.Runtime, TTL: DefaultTTL}
	c.DB = c.Pool()
	switch b {
	case Etcd:
		c.Etcd = etcdtest.Start(t, 1)
		c.Obs = c.Etcd.Client(t)
		c.Prefix = "/test/" + strings.ReplaceAll(t.Name(), "/", "-")
		c.Leadership = etcdlease.NewCluster(c.Obs, c.Prefix)
	case Kubernetes:
		c.Kube = kubetest.Shared(t)
		c.Namespace = c.Kube.Namespace(t)
		cli, err := coordclient.NewForConfig(c.Kube.Config())
		if err != nil {
			t.Fatal(err)
		}
		c.Leases, c.Prefix = cli, kubePrefix
		c.Leadership = kubelease.NewCluster(cli, c.Namespace, c.Prefix)
	default:
		t.Fatalf("jobtest: no backend %q", b)
	}
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
	Session *leadership.Session // nil when no job needs terms
	Sched   *scheduler.Scheduler
	Metrics *prometheus.Registry
	cli     *clientv3.Client // etcd's
	cut     *atomic.Bool     // Kubernetes': set, the client's requests fail
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

// WithLog also sends the instance's log (its session's and its scheduler's)
// to h, beside the test's log.
func WithLog(h slog.Handler) Option {
	return func(_ *configs.File, c *leadership.Config) {
		c.Logger = slog.New(slog.NewMultiHandler(c.Logger.Handler(), h))
	}
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
	if needsTerms(jobs) {
		n.Session = c.session(n, lc)
	}
	n.pool = c.RuntimePool()
	var session scheduler.Session
	if n.Session != nil {
		session = scheduler.Over(n.Session)
	}
	sched, err := scheduler.New(scheduler.Config{File: file, Registry: reg, Session: session, Pool: n.pool,
		Log: lc.Logger, Metrics: n.Metrics, Secrets: file.SecretPaths(func(string) string { return "" })})
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

// session starts n's session on the cluster's backend, through a client of
// its own, and waits until it is ready.
func (c *Cluster) session(n *Node, lc leadership.Config) *leadership.Session {
	c.T.Helper()
	var s *leadership.Session
	var err error
	switch c.Backend {
	case Kubernetes:
		rc := c.Kube.Config()
		n.cut = new(atomic.Bool)
		rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return cutTransport{rt, n.cut} }
		var cli *coordclient.CoordinationV1Client
		if cli, err = coordclient.NewForConfig(rc); err == nil {
			s, err = kubelease.NewSession(kubelease.Config{Client: cli, Namespace: c.Namespace, Prefix: c.Prefix, Config: lc})
		}
	default:
		n.cli = c.Etcd.Client(c.T)
		s, err = etcdlease.NewSession(etcdlease.Config{Client: n.cli, Prefix: c.Prefix, Config: lc})
	}
	if err != nil {
		c.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		c.T.Fatal(err)
	}
	return s
}

// cutTransport fails every new request once cut is set: the instance's
// traffic to the API server stops, as a killed process's does.
type cutTransport struct {
	rt  http.RoundTripper
	cut *atomic.Bool
}

func (t cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.cut.Load() {
		return nil, errors.New("jobtest: the instance crashed")
	}
	return t.rt.RoundTrip(r)
}

func needsTerms(jobs []configs.Job) bool {
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

// Crash stops the instance the way SIGKILL looks from outside: its backend
// and database traffic stops at once (no resign, revoke or last write gets
// out) and its jobs stop.
func (n *Node) Crash() {
	n.once.Do(func() {
		if n.cli != nil {
			_ = n.cli.Close()
		}
		if n.cut != nil {
			n.cut.Store(true)
			// Its session, cut off, ends its lease by its deadline and tries
			// to open another until the test is over.
			n.c.T.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = n.Session.Close(ctx)
			})
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

// Leader is a job's leader as the cluster's backend records it.
type Leader struct {
	leadership.Leader
	// Lease is the etcd lease the term sits on; 0 on Kubernetes, whose terms
	// sit on their instance Lease. Revoke ends either.
	Lease clientv3.LeaseID
}

// Leader is the job's current leader as the backend sees it.
func (c *Cluster) Leader(job string) (Leader, bool) {
	c.T.Helper()
	var l Leader
	var ok bool
	var err error
	if c.Backend == Etcd {
		var k etcdlease.Leader
		k, ok, err = etcdlease.NewCluster(c.Obs, c.Prefix).LeaderKey(context.Background(), job)
		l = Leader{Leader: k.Leader, Lease: k.Lease}
	} else {
		l.Leader, ok, err = c.Leadership.Leader(context.Background(), job)
	}
	if err != nil {
		c.T.Fatal(err)
	}
	return l, ok
}

// Revoke ends the lease instance's session holds, as its backend ends a
// killed instance's (leadership.Cluster.Revoke: etcd revokes the lease; the
// API server deletes the instance Lease) while the instance goes on: its
// session finds its lease lost and its terms end, and peers win its jobs at
// once.
func (c *Cluster) Revoke(instance string) {
	c.T.Helper()
	ctx := context.Background()
	reg, ok, err := c.Leadership.Registration(ctx, instance)
	if err != nil || !ok {
		c.T.Fatalf("jobtest: the registration of %s: found %v, %v", instance, ok, err)
	}
	if err := c.Leadership.Revoke(ctx, reg); err != nil {
		c.T.Fatal(err)
	}
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
func Registry(t testing.TB, types ...scheduler.Type) *scheduler.Registry {
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

// WaitKeys waits until cond holds, woken by each change of the backend's
// records, for a term won or ended: under the cluster's prefix in etcd
// (etcdtest.WaitKeys), or of the Leases of its namespace
// (kubetest.WaitLeases); a watch either way.
func (c *Cluster) WaitKeys(what string, cond func() bool) {
	c.T.Helper()
	if c.Backend == Kubernetes {
		kubetest.WaitLeases(c.T, c.Leases, c.Namespace, what, cond)
		return
	}
	etcdtest.WaitKeys(c.T, c.Obs, c.Prefix+"/", what, cond)
}

// MetricSum adds up every series of a metric family on a node's registry;
// given label/value pairs, only the series that carry all of them.
func (n *Node) MetricSum(t testing.TB, name string, labelPairs ...string) float64 {
	t.Helper()
	return MetricSum(t, n.Metrics, name, labelPairs...)
}

// MetricSum is Node.MetricSum on any registry.
func MetricSum(t testing.TB, reg prometheus.Gatherer, name string, labelPairs ...string) float64 {
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

// RunFunc is a job's Run.
type RunFunc func(ctx context.Context, r *scheduler.Run) error

// WrapRuns is typ with each run of its jobs passed through around, which
// calls run (the job's own Run) or not: a test's way to count runs, or to
// stand in for a crash at a chosen point of one.
func WrapRuns(typ scheduler.Type, around func(ctx context.Context, r *scheduler.Run, run RunFunc) error) scheduler.Type {
	wrapped := typ
	wrapped.New = func(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
		job, err := typ.New(env, spec)
		if err != nil {
			return nil, err
		}
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error { return around(ctx, r, job.Run) }), nil
	}
	return wrapped
}
