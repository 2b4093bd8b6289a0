package certrenew_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/certtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

const jobName = "certs"

// cluster is three instances of snip-jobs sharing one database and one CA:
// each has its own challenge server (its own http.Server on its own port),
// metrics and job; a term is one instance leading with a token.
type cluster struct {
	t       testing.TB
	ca      *testCA
	pool    *pgxpool.Pool // the test's fixtures and checks, as the superuser
	svc     *pgxpool.Pool // the instances' jobs, challenge servers, CLI calls: the runtime role of docs/operations.md
	keyFile string
	keys    *keyring.Keyring
	opts    certrenew.Options
	inst    map[string]*instance
	quiet   bool
	tap     logTap // logged
}

func (c *cluster) logger() *slog.Logger {
	var next slog.Handler = slog.DiscardHandler
	if !c.quiet {
		next = benchtest.Logger(c.t).Handler()
	}
	return slog.New(&tapHandler{Handler: next, tap: &c.tap})
}

// logTap tells tests when a message is first logged.
type logTap struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
	holds   map[string]<-chan struct{}
}

// holdAt makes the instance that logs msg wait, inside that log call, until
// until is closed: a test's way to order a step of one pass after another
// pass's (msg must be logged where the pass holds nothing another needs).
func (c *cluster) holdAt(msg string, until <-chan struct{}) {
	c.tap.mu.Lock()
	defer c.tap.mu.Unlock()
	if c.tap.holds == nil {
		c.tap.holds = map[string]<-chan struct{}{}
	}
	c.tap.holds[msg] = until
}

// logged returns a channel closed when any instance first logs msg after
// this call.
func (c *cluster) logged(msg string) <-chan struct{} {
	c.tap.mu.Lock()
	defer c.tap.mu.Unlock()
	if c.tap.waiting == nil {
		c.tap.waiting = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	c.tap.waiting[msg] = ch
	return ch
}

type tapHandler struct {
	slog.Handler
	tap *logTap
}

func (h *tapHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *tapHandler) Handle(ctx context.Context, r slog.Record) error {
	h.tap.mu.Lock()
	if ch, ok := h.tap.waiting[r.Message]; ok {
		close(ch)
		delete(h.tap.waiting, r.Message)
	}
	hold := h.tap.holds[r.Message]
	h.tap.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *tapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &tapHandler{Handler: h.Handler.WithAttrs(as), tap: h.tap}
}

func (h *tapHandler) WithGroup(name string) slog.Handler {
	return &tapHandler{Handler: h.Handler.WithGroup(name), tap: h.tap}
}

// inflightKey is the sealed certificate key recorded with d's order in
// flight.
func (c *cluster) inflightKey(d string) []byte {
	c.t.Helper()
	var k []byte
	if err := c.pool.QueryRow(context.Background(), `SELECT order_key_sealed FROM certrenew_domains WHERE domain = $1`, d).Scan(&k); err != nil || k == nil {
		c.t.Fatalf("no key recorded with the order of %s in flight: %v", d, err)
	}
	return k
}

// assertKeyOf checks that d's current certificate has the key sealed in
// sealed (an order's).
func (c *cluster) assertKeyOf(d string, sealed []byte) {
	c.t.Helper()
	keyPEM, err := c.keys.Open(sealed, "snip-jobs certrenew certificate key\x00"+d)
	if err != nil {
		c.t.Fatal(err)
	}
	if string(keyPEM) != string(c.current(d).KeyPEM) {
		c.t.Errorf("%s: the current certificate's key is not the one recorded with the order", d)
	}
}

type instance struct {
	name string
	addr string       // the challenge server
	hits atomic.Int64 // challenge requests it answered with 200
	reg  *prometheus.Registry
	job  scheduler.Job
}

type clusterOptions struct {
	ca      caOptions
	options func(*certrenew.Options)
	quiet   bool // no logs (benchmarks)
}

func newCluster(t testing.TB, co clusterOptions) *cluster {
	t.Helper()
	db := dbtest.NewDB(t)
	c := &cluster{t: t, ca: newTestCA(t, co.ca), pool: dbtest.Pool(t, db.Super), svc: dbtest.Pool(t, db.Runtime),
		inst: map[string]*instance{}, quiet: co.quiet}
	c.keyFile = writeKeyFile(t, newKey(t))
	c.keys = c.keyring(c.keyFile)

	c.opts = certrenew.DefaultOptions()
	c.opts.Directory = c.ca.dirURL
	c.opts.CARootsFile = c.ca.rootsFile
	c.opts.Email = "ops@snip.example"
	c.opts.Profile = "default"
	c.opts.KeyFile = c.keyFile
	c.opts.LockDelay = 300 * time.Millisecond
	c.opts.RequirePublicTLD = false       // the tests' names are under .test, which the test CA's DNS resolves
	c.opts.OrderTimeout = 3 * time.Second // lego polls a finalizing order every 50 ms
	if co.options != nil {
		co.options(&c.opts)
	}
	var addrs []string
	for _, name := range []string{"a", "b", "c"} {
		in := c.start(name)
		addrs = append(addrs, in.addr)
	}
	c.ca.front.route(addrs...)
	return c
}

// start starts an instance: its challenge server and its job.
func (c *cluster) start(name string) *instance {
	t := c.t
	in := &instance{name: name, reg: prometheus.NewRegistry()}
	h := challengeHandler(t, c.svc, c.logger().With("instance", name))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		if sw.status == http.StatusOK && strings.HasPrefix(r.URL.Path, certrenew.ChallengePath) {
			in.hits.Add(1)
		}
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	in.addr = ln.Addr().String()
	in.job = c.build(name, in.reg, c.opts)
	c.inst[name] = in
	return in
}

// build makes the job as the scheduler would, from a config entry.
func (c *cluster) build(name string, reg prometheus.Registerer, o certrenew.Options) scheduler.Job {
	c.t.Helper()
	j, err := certrenew.Type().Build(scheduler.Env{
		Instance: name, Pool: c.svc, Log: c.logger().With("instance", name), Metrics: reg,
	}, configs.Job{
		Name: jobName, Type: "certrenew", Singleton: true,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Hour},
		Options:  jobtest.Options(c.t, o),
	})
	if err != nil {
		c.t.Fatalf("build the job on %s: %v", name, err)
	}
	return j
}

// challengeHandler is what every instance serves on port 80: the shared
// tokens, from memory (certserve.Challenges), kept current until the test
// ends.
func challengeHandler(t testing.TB, pool *pgxpool.Pool, log *slog.Logger) http.Handler {
	t.Helper()
	h, err := certserve.NewChallenges(certserve.Config{DB: pool.Config().ConnConfig, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	certtest.Run(t, h.Run, h.Ready())
	return h
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) { w.status = s; w.ResponseWriter.WriteHeader(s) }
