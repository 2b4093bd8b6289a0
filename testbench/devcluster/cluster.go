package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/snip/snip-jobs/app/etcdlocal"
	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/migrations"
	"github.com/snip/snip-jobs/testbench/pgcluster"
)

// Defaults and bounds.
const (
	DefaultInstances = 3
	DefaultHTTPBase  = 9470
	DefaultTTL       = 5 * time.Second
	// StopBound is how long an instance gets after SIGTERM before SIGKILL.
	StopBound = 10 * time.Second
	// childShutdown is the instances' shutdown_timeout: below StopBound, so
	// that a clean stop is not cut short.
	childShutdown = 5 * time.Second
	readyBound    = 90 * time.Second // an instance's start until /readyz answers 200
	prefix        = "/snip-jobs"
	dirPrefix     = "snip-jobs-dev-"
)

// Config configures a dev cluster.
type Config struct {
	// Executable is the snip-jobs binary the instances run. Required.
	Executable string
	// Types are the job types built into Executable. Required.
	Types configs.Types
	// Instances is how many instances to run (default 3).
	Instances int
	// HTTPBase places the supervisor on 127.0.0.1:HTTPBase and instance i
	// (from 1) on HTTPBase+i; a port already in use is replaced by a free one.
	// Negative: free ports for all. 0: DefaultHTTPBase.
	HTTPBase int
	// PGBindir is the folder of PostgreSQL's initdb and postgres (default:
	// found, see pgcluster).
	PGBindir string
	// TTL of the instances' leases (default 5 s; whole seconds, at least 2 s).
	TTL time.Duration
	// Backend keeps the terms: BackendEtcd (default: an embedded etcd) or
	// BackendKubernetes (a local kube-apiserver from the binary the
	// kubernetes backend's tests build into the cache; Start fails, saying
	// so, when it is not there).
	Backend string
	// Out receives what happens, for people: leaders changing, instances
	// exiting, actions taken. Default: discard.
	Out io.Writer
	// ChildOutput, if not nil, also receives every line the instances write,
	// prefixed with the instance's name. The lines always go to files in the
	// cluster's folder.
	ChildOutput io.Writer
	// Log receives the supervisor's own problems. Default: discard.
	Log *slog.Logger
}

// Cluster is a running dev cluster.
type Cluster struct {
	cfg   Config
	log   *slog.Logger
	out   *lineWriter
	dir   string
	begin time.Time

	pg      *pgcluster.Cluster
	dbURL   string
	pool    *pgxpool.Pool
	terms   terms // etcd or a local Kubernetes API server
	ca      *acmeCA
	web     *webTier // with the CA only
	jobs    []demoJob
	domains int

	control    *http.Server
	controlURL string
	served     chan struct{}
	children   []*child
	held       []*net.TCPListener // the instances' ports, passed to each of their processes
	routeMu    sync.Mutex         // routeChallenges

	feed       *feeder
	stopFeed   context.CancelFunc
	feedDone   chan struct{}
	stopWatch  context.CancelFunc
	watchDone  chan struct{}
	ends       endLog // why terms ended, as narrated (why.go)
	closeOnce  sync.Once
	closeErr   error
	closingMu  sync.Mutex
	closingNow bool
	childOutMu sync.Mutex // one line at a time on ChildOutput
}

// Start starts the whole cluster and returns once every instance is ready.
// On failure everything started so far is stopped and removed. ctx bounds the
// start (Ctrl-C during start-up).
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	switch {
	case cfg.Executable == "":
		return nil, errors.New("devcluster: Executable is required")
	case cfg.Types == nil:
		return nil, errors.New("devcluster: Types is required")
	}
	cfg = cfg.withDefaults()
	c := &Cluster{cfg: cfg, log: cfg.Log, out: &lineWriter{w: cfg.Out}, begin: time.Now(), served: make(chan struct{})}
	defer func() {
		if err != nil {
			if cerr := c.Close(context.Background()); cerr != nil {
				c.log.Warn("cleaning up after a failed start", "err", cerr)
			}
		}
	}()

	sweepStale(c.log)
	c.say("starting PostgreSQL, %s and %d instances", map[string]string{BackendEtcd: "etcd", BackendKubernetes: "a Kubernetes API server"}[cfg.Backend], cfg.Instances)
	if c.dir, err = os.MkdirTemp("", dirPrefix); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "dev.pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	if err := c.startDatabase(ctx); err != nil {
		return nil, err
	}
	if err := c.startTerms(ctx); err != nil {
		return nil, err
	}
	challenge, err := c.startCAAndWebTier(ctx)
	if err != nil {
		return nil, err
	}
	events, err := tableExists(ctx, c.pool, "click_events")
	if err != nil {
		return nil, err
	}
	c.feed = &feeder{pool: c.pool, events: events && c.hasJobType("aggregator"), log: c.log}

	// The control server, then the instances.
	lns, controlLn, err := listenPorts(cfg.HTTPBase, cfg.Instances)
	if err != nil {
		return nil, err
	}
	c.held = append(c.held, lns...)
	c.startControl(controlLn)
	if err := c.configureInstances(lns, challenge); err != nil {
		return nil, err
	}
	for _, ch := range c.children {
		if err := ch.start(); err != nil {
			return nil, err
		}
	}
	label, where := c.terms.where()
	c.say("PostgreSQL on port %d (migrated, demo data in), %s at %s; waiting for the instances to be ready",
		c.pg.Port(), label, where)
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}

	feedCtx, stopFeed := context.WithCancel(context.Background())
	c.stopFeed, c.feedDone = stopFeed, make(chan struct{})
	go func() {
		defer close(c.feedDone)
		c.feed.run(feedCtx)
	}()
	return c, nil
}

func (cfg Config) withDefaults() Config {
	if cfg.Instances <= 0 {
		cfg.Instances = DefaultInstances
	}
	if cfg.HTTPBase == 0 {
		cfg.HTTPBase = DefaultHTTPBase
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Backend == "" {
		cfg.Backend = BackendEtcd
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// startDatabase creates the cluster's PostgreSQL, migrated, with the demo data.
func (c *Cluster) startDatabase(ctx context.Context) (err error) {
	c.pg, err = pgcluster.Create(ctx, pgcluster.Options{Bindir: c.cfg.PGBindir, Prefix: dirPrefix + "pg-", Autovacuum: true})
	if err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "pgdir"), []byte(c.pg.Dir()), 0o600); err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	if c.dbURL, err = c.pg.CreateDatabase(ctx, "snip"); err != nil {
		return err
	}
	if err := os.WriteFile(c.URLFile(), []byte(c.dbURL+"\n"), 0o600); err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	if _, err := migrations.Up(ctx, c.dbURL, nil); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if c.pool, err = pgxpool.New(ctx, c.dbURL); err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	c.domains, err = seed(ctx, c.pool)
	return err
}

// startTerms starts what the instances keep their terms in: the cluster's
// one embedded etcd member and a client to it, or a local kube-apiserver.
func (c *Cluster) startTerms(ctx context.Context) error {
	switch c.cfg.Backend {
	case BackendEtcd:
	case BackendKubernetes:
		k, err := startKube(ctx, c.dir, c.cfg.TTL)
		if err != nil {
			return err
		}
		c.terms = k
		return nil
	default:
		return fmt.Errorf("devcluster: backend %q: want %s or %s", c.cfg.Backend, BackendEtcd, BackendKubernetes)
	}
	e := &etcdTerms{ttl: c.cfg.TTL}
	c.terms = e
	var err error
	e.srv, err = etcdlocal.Start(ctx, etcdlocal.Config{Dir: filepath.Join(c.dir, "etcd"), ClientAddr: "127.0.0.1:0", Log: c.log})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	e.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{e.srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	return nil
}

// startCAAndWebTier starts the test CA and the web tier when the certrenew type is
// there, and picks the demo's jobs. It returns each instance's HTTP-01
// listener (none without the CA). The supervisor holds the instances' ports
// and passes them to each of their processes, as systemd would (socket
// activation): nothing else can take a port between a kill and the restart.
func (c *Cluster) startCAAndWebTier(ctx context.Context) (challenge []*net.TCPListener, err error) {
	if _, ok := c.cfg.Types.Options("certrenew"); ok {
		for range c.cfg.Instances {
			ln, err := sockact.Listen("127.0.0.1:0")
			if err != nil {
				return nil, fmt.Errorf("devcluster: %w", err)
			}
			c.held = append(c.held, ln)
			challenge = append(challenge, ln)
		}
	}
	addrs := make([]string, len(challenge))
	for i, ln := range challenge {
		addrs[i] = ln.Addr().String()
	}
	if len(addrs) == 0 {
		addrs = nil
	}
	if c.ca, err = startCA(ctx, c.dir, addrs, c.log); err != nil {
		return nil, fmt.Errorf("ACME test CA: %w", err)
	}
	c.jobs = selectDemoJobs(c.cfg.Types, c.ca)
	if c.ca != nil {
		port := 0 // a negative base: free ports for all
		if c.cfg.HTTPBase > 0 {
			port = c.cfg.HTTPBase + webTierOffset
		}
		if c.web, err = startWebTier(c.dbURL, c.ca.KeyFile, port, c.log); err != nil {
			return nil, err
		}
	}
	return challenge, nil
}

// configureInstances writes each instance's configuration and prepares (does
// not start) its child: admin port lns[i], HTTP-01 listener challenge[i].
func (c *Cluster) configureInstances(lns, challenge []*net.TCPListener) error {
	script, err := writeDemoScript(c.dir)
	if err != nil {
		return err
	}
	for i := 1; i <= c.cfg.Instances; i++ {
		name := fmt.Sprintf("server-%d", i)
		listen := lns[i-1].Addr().String()
		path := filepath.Join(c.dir, name+".yaml")
		env := demoEnv{Dir: c.dir, CA: c.ca, Script: script, Psql: filepath.Join(c.PostgresBindir(), "psql"), Database: c.dbURL}
		socks := []sockact.Socket{{Name: "admin", Listener: lns[i-1]}}
		if challenge != nil {
			env.Challenge = challenge[i-1].Addr().String()
			socks = append(socks, sockact.Socket{Name: "challenge", Listener: challenge[i-1]})
		}
		text, err := instanceConfig{
			Instance: name, Backend: c.terms.configSection(), LeadershipBackend: c.terms.leadershipLine(), URLFile: c.URLFile(), TTL: c.cfg.TTL, Listen: listen,
			Jobs: c.jobs, Env: env, ShutdownIn: childShutdown,
		}.render(c.cfg.Types, path)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, text, 0o644); err != nil {
			return fmt.Errorf("devcluster: %w", err)
		}
		c.children = append(c.children, &child{c: c, name: name, config: path, port: lns[i-1].Addr().(*net.TCPAddr).Port,
			socks: socks, challenge: env.Challenge,
			logPath: filepath.Join(c.dir, name+".log"), page: fmt.Sprintf("http://%s/status/", listen)})
	}
	return nil
}

// waitReady waits until every instance answers /readyz with 200, failing as
// soon as one exits.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyBound)
	defer cancel()
	for _, ch := range c.children {
		if err := ch.waitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// waitReady waits until the instance answers /readyz with 200, failing as
// soon as it exits.
func (ch *child) waitReady(ctx context.Context) error {
	client := http.Client{Timeout: 2 * time.Second}
	for {
		if st := ch.info(); st.State == stateExited {
			return fmt.Errorf("%s exited during start-up (%s); its last lines:\n%s", ch.name, st.Exit, indent(tail(ch.logPath, 15)))
		}
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", ch.port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !sleep.For(ctx, 50*time.Millisecond) {
			return fmt.Errorf("%s not ready (%w); its last lines:\n%s", ch.name, ctx.Err(), indent(tail(ch.logPath, 15)))
		}
	}
}

// Close stops the instances (SIGTERM, then SIGKILL after StopBound), the
// feeder, the control server, etcd and PostgreSQL, and removes every file.
// ctx bounds nothing that would leave processes behind: a cancelled ctx only
// makes the instances' stop immediate (SIGKILL). Calling it again returns the
// first call's result.
func (c *Cluster) Close(ctx context.Context) error {
	c.closeOnce.Do(func() { c.closeErr = c.close(ctx) })
	return c.closeErr
}

func (c *Cluster) close(ctx context.Context) error {
	c.closingMu.Lock()
	c.closingNow = true
	c.closingMu.Unlock()
	var errs []error
	if c.stopWatch != nil {
		c.stopWatch()
		<-c.watchDone
	}
	if c.stopFeed != nil {
		c.stopFeed()
		<-c.feedDone
	}
	stopErrs := make([]error, len(c.children))
	var wg sync.WaitGroup
	for i, ch := range c.children {
		wg.Go(func() { stopErrs[i] = ch.stop(ctx, StopBound) })
	}
	wg.Wait()
	errs = append(errs, stopErrs...)
	if c.control != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = c.control.Shutdown(sctx)
		cancel()
		<-c.served
	}
	c.web.close()
	c.ca.Close()
	for _, ch := range c.children {
		ch.stopDown()
	}
	for _, ln := range c.held {
		ln.Close()
	}
	if c.terms != nil {
		c.terms.close()
	}
	if c.pool != nil {
		c.pool.Close()
	}
	if c.pg != nil {
		if err := c.pg.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("PostgreSQL: %w", err))
		}
	}
	if c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// closing reports whether Close has begun (exits are then expected).
func (c *Cluster) closing() bool {
	c.closingMu.Lock()
	defer c.closingMu.Unlock()
	return c.closingNow
}

// KillAll sends SIGKILL to every instance at once: for a second Ctrl-C, when
// waiting for a clean stop is not wanted. Close still cleans up afterwards.
func (c *Cluster) KillAll() {
	for _, ch := range c.children {
		ch.kill()
	}
}

// Dir is the cluster's folder: configs, logs, etcd's data, the database URL.
func (c *Cluster) Dir() string { return c.dir }

// URLFile holds the database URL (the instances' postgres.url_file).
func (c *Cluster) URLFile() string { return filepath.Join(c.dir, "database-url") }

// DatabaseURL is the URL of the demo database.
func (c *Cluster) DatabaseURL() string { return c.dbURL }

// PostgresDir is PostgreSQL's folder, and PostgresBindir the binaries used.
func (c *Cluster) PostgresDir() string    { return c.pg.Dir() }
func (c *Cluster) PostgresBindir() string { return c.pg.Bindir() }

// Backend names where the terms are kept and says where it is, for people.
func (c *Cluster) Backend() (label, where string) { return c.terms.where() }

// ControlURL is the supervisor's base URL.
func (c *Cluster) ControlURL() string { return c.controlURL }

// Started is how long Start took.
func (c *Cluster) Started() time.Duration { return time.Since(c.begin) }

// Domains is how many demo custom domains were inserted (0 when the table
// does not exist).
func (c *Cluster) Domains() int { return c.domains }

// ClicksGoTo says where the stream of clicks goes, for people.
func (c *Cluster) ClicksGoTo() string { return c.feed.where() }

// ClicksInserted is how many demo clicks were inserted so far.
func (c *Cluster) ClicksInserted() int64 { return c.feed.count() }

// Job is one of the demo's jobs.
type Job struct {
	Name, Type string
	Singleton  bool
}

// Jobs are the demo's jobs, in config order.
func (c *Cluster) Jobs() []Job {
	var out []Job
	for _, j := range c.jobs {
		out = append(out, Job{Name: j.Name, Type: j.Type, Singleton: !j.Everywhere})
	}
	return out
}

// LeftOut are the demo jobs not in this binary's demo, with why.
func (c *Cluster) LeftOut() []string {
	var out []string
	for _, j := range demoJobs {
		if _, ok := c.cfg.Types.Options(j.Type); !ok {
			out = append(out, fmt.Sprintf("%s (job type %q is not built into this binary yet)", j.Name, j.Type))
		} else if j.NeedsCA && c.ca == nil {
			out = append(out, fmt.Sprintf("%s (needs the in-process ACME test CA: not wired into dev yet)", j.Name))
		}
	}
	return out
}

func (c *Cluster) hasJobType(t string) bool {
	for _, j := range c.jobs {
		if j.Type == t {
			return true
		}
	}
	return false
}

// webTierOffset places the demo's HTTPS server after the instances' ports.
const webTierOffset = 10

// HTTPS is the demo's web tier as the banner shows it.
type HTTPS struct {
	Addr     string   // host:port of the TLS server
	RootFile string   // the CA's issuing root, for curl --cacert
	Domains  []string // the demo's custom domains
}

// WebTier returns the demo's HTTPS server; ok is false without the
// certificate renewer.
func (c *Cluster) WebTier() (h HTTPS, ok bool) {
	if c.web == nil {
		return HTTPS{}, false
	}
	return HTTPS{Addr: c.web.addr, RootFile: c.ca.IssuerRootFile, Domains: demoDomains}, true
}

// Instance is one instance as the banner shows it.
type Instance struct {
	Name, Config, Log, Page string
	PID                     int
}

// Instances are the instances, by name.
func (c *Cluster) Instances() []Instance {
	var out []Instance
	for _, ch := range c.children {
		st := ch.info()
		out = append(out, Instance{Name: ch.name, Config: ch.config, Log: ch.logPath, Page: ch.page, PID: st.PID})
	}
	return out
}

// listenPorts binds the supervisor's port and the instances' (which the
// supervisor keeps, to pass): base and base+i when free, else free ports.
func listenPorts(base, n int) (instances []*net.TCPListener, control net.Listener, err error) {
	listen := func(port int) (*net.TCPListener, error) {
		if port > 0 {
			if ln, err := sockact.Listen(fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				return ln, nil
			}
		}
		return sockact.Listen("127.0.0.1:0")
	}
	if base < 0 {
		base = 0
	}
	control, err = listen(base)
	if err != nil {
		return nil, nil, fmt.Errorf("devcluster: control server: %w", err)
	}
	for i := 1; i <= n; i++ {
		port := 0
		if base > 0 {
			port = base + i
		}
		ln, err := listen(port)
		if err != nil {
			control.Close()
			for _, ln := range instances {
				ln.Close()
			}
			return nil, nil, fmt.Errorf("devcluster: a port for instance %d: %w", i, err)
		}
		instances = append(instances, ln)
	}
	return instances, control, nil
}
