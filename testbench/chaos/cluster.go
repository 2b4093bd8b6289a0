package chaos

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/migrations"
	"github.com/snip/snip-jobs/testbench/acmetest"
	"github.com/snip/snip-jobs/testbench/childproc"
	"github.com/snip/snip-jobs/testbench/faultproxy"
	"github.com/snip/snip-jobs/testbench/gobuild"
	"github.com/snip/snip-jobs/testbench/pgcluster"
)

// Prefix is the etcd key prefix of the instances under test.
const Prefix = "/snip-chaos"

// Job names in the instances' config.
const (
	JobProbe      = "probe"
	JobReport     = "weekly-report"
	JobCerts      = "cert-renewer"
	JobAggregator = "aggregator"
	// JobScript is an exec job (a release from before that type runs
	// without it: see scriptJob).
	JobScript = "script"
)

// continuous reports whether job runs continuously (there is no extra run of
// it for an operator to ask for).
func continuous(job string) bool { return job == JobAggregator || job == JobScript }

// Margin is the stop-early margin the instances run with: a quarter of the TTL.
func Margin(ttl time.Duration) time.Duration { return ttl / 4 }

// RenewInterval is the instances' keep-alive interval: a fifth of the TTL.
func RenewInterval(ttl time.Duration) time.Duration { return ttl / 5 }

// Bounds for start-up steps.
const (
	buildTimeout = 5 * time.Minute
	readyBound   = 60 * time.Second
)

// cluster is everything a run starts: the binary, the store (three etcd
// member processes, and on Kubernetes a kube-apiserver over them:
// Options.Backend), PostgreSQL, the CA, three snip-jobs processes and their proxies,
// the observer and the load.
type cluster struct {
	opts   Options
	log    *slog.Logger
	dir    string
	binary string

	etcd        *etcdCluster // the instances' store, or (BackendKubernetes) the kube-apiserver's
	etcdVersion string       // the members' server version
	kube        *kubeStore   // BackendKubernetes
	stopObs     context.CancelFunc
	pg          *pgcluster.Cluster
	scriptDir   string // the script job's records (exectest); "" without it
	dbURL       string // direct, for the harness
	pool        *pgxpool.Pool
	ca          *acmetest.CA
	instances   []*instance
	routeMu     sync.Mutex // routeChallenges
	obs         *observer
	jobs        []string // leader-mode jobs, JobProbe first
	load        *load
}

// jobTypes lists the job types built into binary, from `validate --help`.
func jobTypes(ctx context.Context, binary string) ([]string, error) {
	out, _ := exec.CommandContext(ctx, binary, "validate", "--help").CombinedOutput()
	m := regexp.MustCompile(`Job types built into this binary: ([a-z0-9, -]+)\.`).FindSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("%s validate --help does not list the job types:\n%s", binary, out)
	}
	return strings.Split(string(m[1]), ", "), nil
}

// BuildSnipJobs builds this module's snip-jobs, as a run does without
// Options.Binary, where every test process of the checkout shares it
// (gobuild.Shared): for several runs to share (Options.Binary).
func BuildSnipJobs(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	root, err := gobuild.ModuleRoot()
	if err != nil {
		return "", err
	}
	return gobuild.Shared(ctx, filepath.Join(root, "cmd", "snip-jobs"), "snip-jobs")
}

// buildBinary builds snip-jobs, shared by the checkout's runs
// (gobuild.Shared); broken, with o's patches (Options.brokenBuild; their
// overlay written into dir), as a binary of its own, linked again only when
// a patched source changes.
func buildBinary(ctx context.Context, dir string, o Options) (string, error) {
	patches, name := o.brokenBuild()
	if len(patches) == 0 {
		return BuildSnipJobs(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	root, err := gobuild.ModuleRoot()
	if err != nil {
		return "", err
	}
	overlay, err := brokenOverlay(root, dir, patches)
	if err != nil {
		return "", err
	}
	return gobuild.Shared(ctx, filepath.Join(root, "cmd", "snip-jobs"), name, "-overlay", overlay)
}

func startCluster(ctx context.Context, o Options) (_ *cluster, err error) {
	c := &cluster{opts: o, log: o.Log}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.dir, err = os.MkdirTemp(o.WorkDir, "snip-chaos-"); err != nil {
		return nil, err
	}
	begin := time.Now()
	runs, err := c.build(ctx)
	if err != nil {
		return nil, err
	}
	store, err := c.startStore(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.startDatabase(ctx); err != nil {
		return nil, err
	}
	if c.ca, err = acmetest.Start(c.dir); err != nil {
		return nil, err
	}
	keyFile := filepath.Join(c.dir, "certificate-keys")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	c.jobs = []string{JobProbe, JobReport, JobCerts, JobAggregator}
	jobs := fmt.Sprintf(jobsYAML, c.ca.DirectoryURL, c.ca.RootsFile, acmetest.Profile, keyFile)
	if o.previous == "" {
		script, err := c.scriptJob()
		if err != nil {
			return nil, err
		}
		jobs += script
		c.jobs = append(c.jobs, JobScript)
	}
	for i := range 3 {
		in, err := c.newInstance(fmt.Sprintf("server-%c", 'a'+i), runs)
		if err != nil {
			return nil, err
		}
		if err := writeInstanceConfig(c.dir, in, store(in), o, jobs); err != nil {
			return nil, err
		}
	}
	octx, stopObs := context.WithCancel(ctx)
	c.stopObs = stopObs
	if c.obs, err = c.observe(octx); err != nil {
		return nil, fmt.Errorf("observe leaders: %w", err)
	}
	for _, in := range c.instances {
		if err := in.start(); err != nil {
			return nil, err
		}
	}
	c.load = startLoad(ctx, c.pool)
	if err := c.settle(ctx, time.Now()); err != nil {
		return nil, fmt.Errorf("the cluster did not come up: %w", err)
	}
	c.log.Info("cluster up", "dir", c.dir, "jobs", c.jobs, "took", time.Since(begin).Round(time.Millisecond))
	return c, nil
}

// build builds snip-jobs (broken, if asked) and returns the binary the
// instances start: that one, or the previous release's. Every job the
// checker checks must run: a binary without one of their types is an error,
// not a run that silently checks less.
func (c *cluster) build(ctx context.Context) (runs string, err error) {
	begin := time.Now()
	if c.binary = c.opts.Binary; c.binary == "" || c.opts.broken() {
		if c.binary, err = buildBinary(ctx, c.dir, c.opts); err != nil {
			return "", err
		}
	}
	runs = c.binary
	if c.opts.previous != "" {
		runs = c.opts.previous
	}
	types, err := jobTypes(ctx, runs)
	if err != nil {
		return "", err
	}
	c.log.Info("built snip-jobs", "broken", c.opts.brokenLabel(), "types", types, "took", time.Since(begin).Round(time.Millisecond))
	var missing []string
	for _, t := range []string{"sql", "weeklyreport", "certrenew", "aggregator"} {
		if !slices.Contains(types, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("this snip-jobs lacks the job type(s) %s (it has %s): the checker needs every job", strings.Join(missing, ", "), strings.Join(types, ", "))
	}
	return runs, nil
}

// startDatabase creates PostgreSQL's database, migrated by this build or by
// the previous release (as an operator would), with the checker's schema.
func (c *cluster) startDatabase(ctx context.Context) (err error) {
	if c.pg, err = pgcluster.Create(ctx, pgcluster.Options{Prefix: "snip-chaos-pg-"}); err != nil {
		return err
	}
	if c.dbURL, err = c.pg.CreateDatabase(ctx, "chaos"); err != nil {
		return err
	}
	if c.opts.previous == "" {
		if _, err := migrations.Up(ctx, c.dbURL, nil); err != nil {
			return fmt.Errorf("migrations: %w", err)
		}
	} else if err := c.migrateWith(ctx, c.opts.previous); err != nil {
		return err
	}
	if c.pool, err = pgxpool.New(ctx, c.dbURL); err != nil {
		return err
	}
	return setupSchema(ctx, c.pool)
}

// newInstance prepares (does not start) an instance running binary: its
// ports, held by the harness as systemd would and passed at every start (no
// other process can take them between a kill and the restart), and a fault
// proxy to each etcd member (or to the kube-apiserver) and to PostgreSQL.
func (c *cluster) newInstance(name, binary string) (_ *instance, err error) {
	in := &instance{name: name, binary: binary, logPath: filepath.Join(c.dir, name+".log"), changed: c.routeChallenges}
	c.instances = append(c.instances, in) // closed with the cluster, however far this gets
	if in.adminLn, err = sockact.Listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	if in.challengeLn, err = sockact.Listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	in.adminURL = "http://" + in.adminLn.Addr().String()
	in.challenge = in.challengeLn.Addr().String()
	for _, addr := range c.storeAddrs() {
		p, err := faultproxy.New(addr)
		if err != nil {
			return nil, err
		}
		in.store = append(in.store, p)
	}
	pgu, err := url.Parse(c.dbURL)
	if err != nil {
		return nil, err
	}
	if in.db, err = faultproxy.New(pgu.Host); err != nil {
		return nil, err
	}
	u := *pgu
	u.Host = in.db.Addr()
	q := u.Query()
	q.Set("connect_timeout", "10")
	u.RawQuery = q.Encode()
	in.databaseURL = u.String()
	return in, nil
}

// migrateWith runs `binary migrate` on the database, as an operator does.
func (c *cluster) migrateWith(ctx context.Context, binary string) error {
	cfg := filepath.Join(c.dir, "migrate.yaml")
	if err := os.WriteFile(cfg, []byte("instance: migrator\npostgres:\n  url_env: SNIP_JOBS_DATABASE_URL\njobs: []\n"), 0o600); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, binary, "migrate", "--config", cfg)
	cmd.Env = childproc.Env("SNIP_JOBS_DATABASE_URL=" + c.dbURL)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s migrate: %w\n%s", binary, err, out)
	}
	return nil
}

// settle waits until every instance runs and is ready, every leader-mode job
// has a leader, and the probe has committed a row after `after` with the
// current probe leader's token.
func (c *cluster) settle(ctx context.Context, after time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, readyBound)
	defer cancel()
	var why string
	for {
		why = c.unsettled(ctx, after)
		if why == "" {
			return nil
		}
		if !sleep.For(ctx, 50*time.Millisecond) {
			for _, in := range c.instances {
				if !in.running() {
					why += fmt.Sprintf("\n%s: exit status %d; the end of its log:\n%s", in.name, lastExit(in), in.logTail(12))
				}
			}
			return fmt.Errorf("not settled within %v: %s", readyBound, why)
		}
	}
}

func (c *cluster) unsettled(ctx context.Context, after time.Time) string {
	for _, in := range c.instances {
		if !in.running() {
			return in.name + " is not running"
		}
		if !in.ready(ctx) {
			return in.name + " is not ready"
		}
	}
	ls := c.obs.leaders()
	for _, j := range c.jobs {
		if _, ok := ls[j]; !ok {
			return j + " has no leader"
		}
	}
	var n int
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err := c.pool.QueryRow(qctx, `SELECT count(*) FROM chaos_probe WHERE token = $1 AND committed_at > $2`, ls[JobProbe].Token, after).Scan(&n)
	if err != nil {
		return "probe: " + err.Error()
	}
	if n == 0 {
		return "no probe write by the current term yet"
	}
	return ""
}

// routeChallenges points the CA's validations at the running instances'
// challenge listeners, as a load balancer's health check would: a stopped
// instance's port is still bound (the harness holds it), and a connection to
// it would wait in the backlog instead of being refused and tried elsewhere.
func (c *cluster) routeChallenges() {
	c.routeMu.Lock() // the last to run reads the latest states
	defer c.routeMu.Unlock()
	var addrs []string
	for _, in := range c.instances {
		if in.running() {
			addrs = append(addrs, in.challenge)
		}
	}
	c.ca.Route(addrs...)
}

func (c *cluster) instance(name string) *instance {
	for _, in := range c.instances {
		if in.name == name {
			return in
		}
	}
	return nil
}

// stop stops the load and the instances (SIGTERM, then SIGKILL after a bound).
func (c *cluster) stopInstances() {
	for _, in := range c.instances {
		if in.running() {
			_ = in.signal(sigCONT)
			_ = in.signal(sigTERM)
		}
	}
	for _, in := range c.instances {
		in.wait(20 * time.Second)
	}
}

func (c *cluster) close() {
	if c.load != nil {
		c.load.stop()
	}
	for _, in := range c.instances {
		in.kill()
		in.closeLinks()
	}
	if c.ca != nil {
		c.ca.Close()
	}
	if c.stopObs != nil {
		c.stopObs()
	}
	if c.kube != nil {
		c.kube.close()
	}
	if c.etcd != nil {
		c.etcd.close()
	}
	if c.pool != nil {
		c.pool.Close()
	}
	if c.pg != nil {
		if err := c.pg.Destroy(); err != nil {
			c.log.Warn("remove PostgreSQL", "err", err)
		}
	}
	if c.dir != "" && !c.opts.KeepDir {
		_ = os.RemoveAll(c.dir)
	}
}

var errNoLeader = errors.New("no leader")
