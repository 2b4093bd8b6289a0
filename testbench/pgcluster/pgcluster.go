// Package pgcluster runs a throwaway PostgreSQL cluster from the machine's
// PostgreSQL server binaries (Debian's postgresql-15: initdb and postgres): its
// own data directory in a temporary folder (in memory, /dev/shm, when the
// machine has room there: folder.go), its own postmaster on 127.0.0.1 on
// a free port, trust authentication for the superuser role "postgres". The
// tests (testbench/benchtest) and snip-dev use it.
//
// What is guaranteed: Create returns a cluster that accepts connections on its
// port, and checks that the server answering there is this cluster (not another
// one that took the port); on failure nothing is left behind. Stop and Start
// keep the data directory, so committed data survives them. Destroy stops the
// server (immediate shutdown) and removes every file. The postmaster is started
// with SIGQUIT as its parent-death signal (package pdeathsig): if this process
// dies without calling Destroy, the server shuts down at once rather than
// outliving it (its folder stays behind: on disk until removed, in memory
// until the next Create sweeps it).
//
// What is NOT provided: durability (fsync, synchronous_commit and
// full_page_writes are off: a Stop keeps committed data, an OS crash would
// not), or any security beyond loopback (any local user may connect as the
// superuser without a password). It is for tests and development only.
//
// initdb runs once per set of server binaries: its output is kept in the user
// cache folder (~/.cache/snip-jobs/pg-initdb) and later clusters start from a
// copy with a system identifier of their own (initdb.go).
//
// When the effective user is root, initdb and postgres, which refuse to run as
// root, run as the OS user "postgres" (created by the Debian package), and the
// cluster's folder is given to that user.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/testbench/freeport"
	"github.com/snip/snip-jobs/testbench/pdeathsig"
)

// Bounds for waiting on the server. They are generous on purpose: they only
// decide how long a broken environment takes to report itself, never whether
// a healthy one works.
const (
	readyTimeout = 60 * time.Second // postmaster start until it accepts a connection
	stopTimeout  = 60 * time.Second // fast shutdown (one checkpoint; fsync is off)
	killTimeout  = 10 * time.Second // immediate shutdown before SIGKILL
	queryTimeout = 30 * time.Second // CREATE DATABASE and similar housekeeping
	adminConns   = 4                // housekeeping statements at once (tests create databases in parallel)
)

// ErrNoServerBinaries is returned (wrapped) by Create when initdb and postgres
// cannot be found. Its message names the Debian package to install.
var ErrNoServerBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found: " +
	"install the Debian package postgresql-15 (apt-get install postgresql-15)")

// errPortInUse marks a start that failed because another process took the
// port between choosing it and the postmaster binding it.
var errPortInUse = errors.New("port already in use")

// Options configures Create. The zero value is fine.
type Options struct {
	// Bindir is the folder of initdb and postgres. Empty: pg_config --bindir,
	// else /usr/lib/postgresql/15/bin, else the newest /usr/lib/postgresql/*/bin.
	Bindir string
	// Prefix starts the name of the cluster's temporary folder (default
	// "pgcluster-").
	Prefix string
	// Autovacuum keeps autovacuum on, for a cluster that lives for days
	// (snip-dev). Off by default: tests make hundreds of databases, and the
	// launcher forks a worker for each of them every minute, each fork costing
	// tens of milliseconds of CPU on a virtual machine.
	Autovacuum bool
}

// Cluster is a throwaway PostgreSQL cluster.
type Cluster struct {
	bindir string              // initdb, postgres
	dir    string              // data/, server.log and the unix socket
	folder clusterDir          // dir, with its claim when in memory
	port   int                 // fixed for the life of the cluster
	cred   *syscall.Credential // the postgres OS user when we are root; nil otherwise

	mu   sync.Mutex
	proc *postmaster // nil while stopped

	adminMu sync.Mutex
	admin   *pgxpool.Pool // exec's connections to the database postgres; nil until used and after a stop
}

// postmaster is one run of the server process, a direct child of this process.
type postmaster struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
	err    error         // cmd.Wait's result; read only after exited is closed
}

// Create initialises a cluster in a new temporary folder and starts it. ctx
// bounds the start (as does a minute); on failure nothing is left behind.
func Create(ctx context.Context, o Options) (_ *Cluster, err error) {
	bindir := o.Bindir
	if bindir == "" {
		if bindir, err = FindBindir(); err != nil {
			return nil, err
		}
	} else if !hasServerBinaries(bindir) {
		return nil, fmt.Errorf("%w; tried %s (given)", ErrNoServerBinaries, bindir)
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = "pgcluster-"
	}
	folder, err := makeClusterDir(ctx, prefix, cred)
	if err != nil {
		return nil, err
	}
	c := &Cluster{bindir: bindir, dir: folder.path, folder: folder, cred: cred}
	defer func() {
		if err != nil {
			folder.release()
		}
	}()

	if err := c.initDataDir(); err != nil {
		return nil, err
	}

	// Settings that hold for every start; the port is given on the command
	// line instead, because the first start may have to pick another one.
	conf := fmt.Sprintf(`
# pgcluster: throwaway, loopback only, not durable
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
# what each statement cost, counted by the server itself: tests and
# benchmarks that claim "no query" read pg_stat_statements
shared_preload_libraries = 'pg_stat_statements'
autovacuum = %t
`, strings.ReplaceAll(c.dir, "'", "''"), o.Autovacuum)
	f, err := os.OpenFile(filepath.Join(c.dataDir(), "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	_, err = io.WriteString(f, conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}

	// The free port is only free until someone else binds it; a parallel
	// process starting its own cluster can win that race.
	for attempt := 1; ; attempt++ {
		if c.port, err = freeport.Port(); err != nil {
			return nil, err
		}
		c.mu.Lock()
		err = c.startLocked(ctx)
		c.mu.Unlock()
		if err == nil {
			return c, nil
		}
		if attempt == 3 || !errors.Is(err, errPortInUse) || ctx.Err() != nil {
			return nil, err
		}
	}
}

// URL returns the connection URL of database as the superuser "postgres".
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, database)
}

// Port is the TCP port the server listens on (127.0.0.1), fixed for the life
// of the cluster.
func (c *Cluster) Port() int { return c.port }

// Dir is the cluster's folder: data/, server.log and the unix socket.
func (c *Cluster) Dir() string { return c.dir }

// Bindir is the folder of the server binaries in use.
func (c *Cluster) Bindir() string { return c.bindir }

// CreateDatabase creates an empty database called name and returns its URL.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	return c.createDatabase(ctx, name, "")
}

// CreateDatabaseFrom creates a database called name as a copy of the database
// template (CREATE DATABASE … TEMPLATE) and returns its URL. PostgreSQL
// refuses while another session is connected to template.
func (c *Cluster) CreateDatabaseFrom(ctx context.Context, name, template string) (string, error) {
	return c.createDatabase(ctx, name, template)
}

// MakeTemplate marks the database name a template that accepts no
// connections, so every copy of it is a copy of what it is now.
func (c *Cluster) MakeTemplate(ctx context.Context, name string) error {
	sql := "ALTER DATABASE " + pgx.Identifier{name}.Sanitize() + " WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"
	if err := c.exec(ctx, sql); err != nil {
		return fmt.Errorf("pgcluster: make %s a template: %w", name, err)
	}
	return nil
}

func (c *Cluster) createDatabase(ctx context.Context, name, template string) (string, error) {
	sql := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		// FILE_COPY copies the files and checkpoints, cheap with fsync off:
		// 2-3 times faster here than WAL_LOG's block-by-block copy.
		sql += " TEMPLATE " + pgx.Identifier{template}.Sanitize() + " STRATEGY FILE_COPY"
	}
	if err := c.exec(ctx, sql); err != nil {
		return "", fmt.Errorf("pgcluster: create database %s: %w", name, err)
	}
	return c.URL(name), nil
}

// exec runs one housekeeping statement in the database postgres, on a
// pooled connection: a new one costs ~50 ms of CPU on a paravirtualized
// machine, and a test binary creates dozens of databases.
func (c *Cluster) exec(ctx context.Context, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	pool, err := c.adminPool()
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, sql)
	return err
}

// adminPool is the pool of exec's connections, made on first use.
func (c *Cluster) adminPool() (*pgxpool.Pool, error) {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	if c.admin == nil {
		cfg, err := pgxpool.ParseConfig(c.URL("postgres"))
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = adminConns
		if c.admin, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
			return nil, err
		}
	}
	return c.admin, nil
}

// closeAdmin closes exec's connections before the server stops, so that
// none outlives it; the next exec opens new ones.
func (c *Cluster) closeAdmin() {
	c.adminMu.Lock()
	defer c.adminMu.Unlock()
	if c.admin != nil {
		c.admin.Close()
		c.admin = nil
	}
}

// Stop shuts the server down the way pg_ctl stop -m fast does (SIGINT: abort
// open transactions, checkpoint, exit) and waits for the postmaster to exit.
// The data directory is kept; Start brings the same cluster back.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return fmt.Errorf("pgcluster: stop: PostgreSQL on port %d is not running", c.port)
	}
	c.closeAdmin()
	pm := c.proc
	c.proc = nil
	select {
	case <-pm.exited:
		return fmt.Errorf("pgcluster: postgres had already exited: %v\n--- server log ---\n%s", pm.err, c.logSince(-1))
	default:
	}
	if err := stopPostmaster(pm, syscall.SIGINT, stopTimeout); err != nil {
		return fmt.Errorf("pgcluster: %w\n--- server log ---\n%s", err, c.logSince(-1))
	}
	return nil
}

// Start starts the server again on the same port and data directory and
// waits until it accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return fmt.Errorf("pgcluster: start: PostgreSQL on port %d is already running", c.port)
	}
	if err := c.startLocked(ctx); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	return nil
}

// Destroy stops the server (immediate shutdown) if it runs and removes the
// cluster's files. Calling it again is harmless.
func (c *Cluster) Destroy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeAdmin()
	var errs []error
	if c.proc != nil {
		pm := c.proc
		c.proc = nil
		errs = append(errs, stopPostmaster(pm, syscall.SIGQUIT, killTimeout))
	}
	errs = append(errs, c.folder.release())
	return errors.Join(errs...)
}

func (c *Cluster) dataDir() string { return filepath.Join(c.dir, "data") }
func (c *Cluster) logPath() string { return filepath.Join(c.dir, "server.log") }

// command prepares one of the server binaries to run as the server's OS user.
func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bindir, name), args...)
	cmd.Dir = c.dir // the postgres user may not be able to enter our working directory
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	return cmd
}

// startLocked starts the postmaster and waits until it accepts connections on
// its TCP port. c.mu is held.
func (c *Cluster) startLocked(ctx context.Context) error {
	logf, err := os.OpenFile(c.logPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	logStart, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if c.cred != nil {
		if err := logf.Chown(int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return err
		}
	}

	cmd := c.command("postgres", "-D", c.dataDir(), "-p", strconv.Itoa(c.port))
	cmd.Stdout = logf
	cmd.Stderr = logf
	// If this process dies without destroying the cluster (a panic, the test
	// -timeout alarm, SIGKILL), the kernel sends the postmaster SIGQUIT: an
	// immediate shutdown instead of a leaked server.
	if err := pdeathsig.Start(cmd, syscall.SIGQUIT); err != nil {
		return fmt.Errorf("run postgres: %w", err)
	}
	pm := &postmaster{cmd: cmd, exited: make(chan struct{})}
	go func() {
		pm.err = cmd.Wait()
		close(pm.exited)
	}()

	if err := c.waitReady(ctx, pm); err != nil {
		_ = stopPostmaster(pm, syscall.SIGQUIT, killTimeout)
		log := c.logSince(logStart)
		if strings.Contains(log, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return fmt.Errorf("%w\n--- server log ---\n%s", err, log)
	}
	c.proc = pm
	return nil
}

// waitReady polls until the server accepts a connection to its own data
// directory, the postmaster exits, ctx ends or readyTimeout passes.
func (c *Cluster) waitReady(ctx context.Context, pm *postmaster) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	delay := time.Millisecond
	for {
		err := c.ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-pm.exited:
			return fmt.Errorf("postgres exited during start-up: %v", pm.err)
		case <-ctx.Done():
			return fmt.Errorf("postgres on port %d did not accept connections (%w): %v", c.port, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// ping connects over TCP and checks that the server answering is ours, not
// another cluster that took the port.
func (c *Cluster) ping(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var dataDir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
		return err
	}
	if dataDir != c.dataDir() {
		return fmt.Errorf("%w: port %d is served by the cluster in %s", errPortInUse, c.port, dataDir)
	}
	return nil
}

// stopPostmaster signals the postmaster (SIGINT: fast shutdown, SIGQUIT:
// immediate) and waits for it to exit, killing it after timeout.
func stopPostmaster(pm *postmaster, sig syscall.Signal, timeout time.Duration) error {
	_ = pm.cmd.Process.Signal(sig) // fails only if it has exited already
	select {
	case <-pm.exited:
		if pm.err != nil && sig != syscall.SIGQUIT {
			return fmt.Errorf("postgres exited with %v", pm.err)
		}
		return nil
	case <-time.After(timeout):
		_ = pm.cmd.Process.Kill()
		<-pm.exited
		return fmt.Errorf("postgres did not exit within %v of %v; killed it", timeout, sig)
	}
}

// logSince returns the server log written since offset (the last 40 lines
// at most); a negative offset means the whole log.
func (c *Cluster) logSince(offset int64) string {
	data, err := os.ReadFile(c.logPath())
	if err != nil {
		return fmt.Sprintf("(cannot read server log: %v)", err)
	}
	if offset > 0 && offset <= int64(len(data)) {
		data = data[offset:]
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 40 {
		lines = append([]string{"..."}, lines[len(lines)-40:]...)
	}
	return strings.Join(lines, "\n")
}

// FindBindir returns the folder of initdb and postgres: pg_config's answer,
// else /usr/lib/postgresql/15/bin, else the newest /usr/lib/postgresql/*/bin.
// The error wraps ErrNoServerBinaries and says where it looked.
func FindBindir() (string, error) {
	var tried []string
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err == nil {
		dir := strings.TrimSpace(string(out))
		if hasServerBinaries(dir) {
			return dir, nil
		}
		tried = append(tried, dir+" (pg_config --bindir)")
	} else {
		tried = append(tried, fmt.Sprintf("pg_config --bindir (%v)", err))
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if v == 15 {
			return 1e9
		}
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	tried = append(tried, "/usr/lib/postgresql/*/bin")
	return "", fmt.Errorf("%w; tried %s", ErrNoServerBinaries, strings.Join(tried, ", "))
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// serverCredential returns the postgres OS user when we run as root (initdb
// and postgres refuse to run as root), and nil otherwise.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, so the server must run as the postgres OS user (created by the Debian package postgresql-15): %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres user: uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("postgres user: gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
