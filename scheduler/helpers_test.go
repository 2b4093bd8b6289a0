package scheduler_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/testenv"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/migrations"
	"github.com/snip/snip-jobs/scheduler"
)

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m)) }

const patience = 90 * time.Second

// cluster is a real etcd member and a real PostgreSQL database shared by the
// instances a test starts in-process.
type cluster struct {
	t      *testing.T
	etcd   *testenv.EtcdCluster
	url    string
	db     *pgxpool.Pool // the test's own view of the database
	prefix string
	ttl    time.Duration
	obs    *clientv3.Client // the test's own etcd client
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, etcd: testenv.StartEtcd(t, 1), url: testenv.PostgresDB(t), ttl: 2 * time.Second,
		prefix: "/test/" + strings.ReplaceAll(t.Name(), "/", "-")}
	ctx := context.Background()
	if _, err := migrations.Up(ctx, c.url, nil); err != nil {
		t.Fatal(err)
	}
	c.db = c.pool()
	c.obs = c.etcd.Client(t)
	if _, err := c.db.Exec(ctx, `CREATE TABLE test_events (
		id bigserial PRIMARY KEY, job text NOT NULL, instance text NOT NULL, token bigint NOT NULL,
		slot timestamptz, at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) pool() *pgxpool.Pool {
	c.t.Helper()
	p, err := pgxpool.New(context.Background(), c.url)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(p.Close)
	return p
}

// node is one snip-jobs instance running in the test process.
type node struct {
	name    string
	cli     *clientv3.Client
	session *leadership.Session
	sched   *scheduler.Scheduler
	metrics *prometheus.Registry
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once
}

type nodeOpt func(*configs.File, *leadership.Config)

func withTTL(ttl time.Duration) nodeOpt {
	return func(_ *configs.File, c *leadership.Config) { c.TTL, c.Margin = ttl, ttl*3/10 }
}

// start runs an instance with the given jobs. etcd=false starts it without a
// leadership session (database-mode jobs only).
func (c *cluster) start(name string, reg *scheduler.Registry, jobs []configs.Job, opts ...nodeOpt) *node {
	c.t.Helper()
	file := &configs.File{Instance: name, Jobs: jobs}
	lc := leadership.Config{Prefix: c.prefix, Instance: name, TTL: c.ttl, Margin: c.ttl / 4, Logger: testenv.Logger(c.t)}
	for _, o := range opts {
		o(file, &lc)
	}
	n := &node{name: name, metrics: prometheus.NewRegistry(), done: make(chan struct{})}
	if needsEtcd(jobs) {
		n.cli = c.etcd.Client(c.t)
		lc.Client = n.cli
		s, err := leadership.NewSession(lc)
		if err != nil {
			c.t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		if err := s.WaitReady(ctx); err != nil {
			c.t.Fatal(err)
		}
		n.session = s
	}
	sched, err := scheduler.New(scheduler.Config{File: file, Registry: reg, Session: n.session, Pool: c.pool(),
		Log: testenv.Logger(c.t), Metrics: n.metrics})
	if err != nil {
		c.t.Fatal(err)
	}
	n.sched = sched
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() {
		defer close(n.done)
		_ = sched.Run(ctx)
	}()
	c.t.Cleanup(n.stop)
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

// stop shuts the instance down as SIGTERM does: jobs cancelled, terms
// resigned, lease revoked.
func (n *node) stop() {
	n.once.Do(func() {
		n.cancel()
		<-n.done
		if n.session != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = n.session.Close(ctx)
		}
	})
}

// crash stops the instance the way SIGKILL looks from outside: its etcd
// traffic stops at once (no revoke, no resign reaches etcd) and its jobs stop.
func (n *node) crash() {
	n.once.Do(func() {
		if n.cli != nil {
			_ = n.cli.Close()
		}
		n.cancel()
		<-n.done
	})
}

// grid fires on every multiple of its duration since the zero time: slots are
// the same instants whoever computes them, like a cron spec's.
type grid time.Duration

func (g grid) Next(t time.Time) time.Time {
	d := time.Duration(g)
	return t.Truncate(d).Add(d)
}

func continuous(name, typ string) configs.Job {
	return configs.Job{Name: name, Type: typ, Singleton: true, Grace: 2 * time.Second,
		Schedule: configs.Schedule{Kind: configs.Continuous}}
}

func cronJob(name, typ string, every time.Duration, coord configs.Coordination, policy configs.CatchUpPolicy) configs.Job {
	return configs.Job{Name: name, Type: typ, Singleton: true, Grace: 2 * time.Second,
		Schedule: configs.Schedule{Kind: configs.Cron, Cron: "grid " + every.String(), Spec: grid(every),
			Location: time.UTC, Coordination: coord, CatchUp: policy, CatchUpWindow: time.Hour}}
}

// recordType is a job type whose every run writes one fenced row to
// test_events (a continuous run writes one every 20 ms until its context ends).
// completeSlot makes a cron run complete its slot in the same transaction.
func recordType(name string, completeSlot bool) scheduler.Type {
	return scheduler.Type{Name: name, New: func(env scheduler.Env, spec configs.Job) (scheduler.Job, error) {
		write := func(ctx context.Context, r *scheduler.Run) error {
			if r.Token == 0 { // not a singleton: nothing to fence by
				_, err := env.Pool.Exec(ctx, `INSERT INTO test_events (job, instance, token) VALUES ($1, $2, 0)`, r.Job, r.Instance)
				return err
			}
			return r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
				var slot *time.Time
				if !r.Slot.IsZero() {
					slot = &r.Slot
				}
				if _, err := tx.Exec(ctx, `INSERT INTO test_events (job, instance, token, slot) VALUES ($1, $2, $3, $4)`,
					r.Job, r.Instance, r.Token, slot); err != nil {
					return err
				}
				if completeSlot && slot != nil {
					return r.CompleteSlot(ctx, tx)
				}
				return nil
			})
		}
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			if spec.Schedule.Kind != configs.Continuous {
				return write(ctx, r)
			}
			for {
				if err := write(ctx, r); err != nil {
					return err
				}
				r.Progress()
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(20 * time.Millisecond):
				}
			}
		}), nil
	}}
}

func registry(t *testing.T, types ...scheduler.Type) *scheduler.Registry {
	t.Helper()
	r, err := scheduler.NewRegistry(types...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// event is a row of test_events.
type event struct {
	ID       int64
	Instance string
	Token    int64
	Slot     *time.Time
}

func (c *cluster) events(job string) []event {
	c.t.Helper()
	rows, err := c.db.Query(context.Background(), `SELECT id, instance, token, slot FROM test_events WHERE job = $1 ORDER BY id`, job)
	if err != nil {
		c.t.Fatal(err)
	}
	evs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[event])
	if err != nil {
		c.t.Fatal(err)
	}
	return evs
}

// checkOneWriterAtATime: in commit order, tokens never go down, and each token
// belongs to one instance.
func (c *cluster) checkOneWriterAtATime(job string) []event {
	c.t.Helper()
	evs := c.events(job)
	owner := map[int64]string{}
	for i, e := range evs {
		if i > 0 && e.Token < evs[i-1].Token {
			c.t.Errorf("%s: row %d written with token %d after token %d had written", job, e.ID, e.Token, evs[i-1].Token)
		}
		if o, ok := owner[e.Token]; ok && o != e.Instance {
			c.t.Errorf("%s: token %d used by %s and %s", job, e.Token, o, e.Instance)
		}
		owner[e.Token] = e.Instance
	}
	return evs
}

func (c *cluster) leader(job string) (leadership.Leader, bool) {
	c.t.Helper()
	l, ok, err := leadership.Observe(context.Background(), c.obs, c.prefix, job)
	if err != nil {
		c.t.Fatal(err)
	}
	return l, ok
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for: %s", patience, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
