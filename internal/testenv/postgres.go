package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Bounds for waiting on the server. They are generous on purpose: they only
// decide how long a broken environment takes to report itself, never whether
// a healthy one passes.
const (
	pgReadyTimeout = 60 * time.Second // postmaster start until it accepts a connection
	pgStopTimeout  = 60 * time.Second // fast shutdown (one checkpoint; fsync is off)
	pgKillTimeout  = 10 * time.Second // immediate shutdown before SIGKILL
	pgQueryTimeout = 30 * time.Second // CREATE DATABASE and similar housekeeping
)

// errPortInUse marks a start that failed because another process took the
// port between choosing it and the postmaster binding it.
var errPortInUse = errors.New("port already in use")

// Postgres is a throwaway PostgreSQL cluster: its own data directory, its own
// postmaster listening on 127.0.0.1 on a free port, trust authentication for
// the superuser role "postgres". Durability is switched off (fsync,
// synchronous_commit and full_page_writes are off): a Stop or Restart keeps
// committed data, an OS crash would not.
type Postgres struct {
	bindir string              // initdb, postgres
	dir    string              // data/, server.log and the unix socket
	port   int                 // fixed for the life of the cluster
	cred   *syscall.Credential // the postgres OS user when we are root; nil otherwise
	shared bool                // the cluster behind PostgresDB: Stop and Start are refused

	dbSeq atomic.Int64 // CreateDatabase names

	mu   sync.Mutex
	proc *postmaster // nil while stopped
}

// postmaster is one run of the server process, a direct child of the test
// binary.
type postmaster struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
	err    error         // cmd.Wait's result; read only after exited is closed
}

// StartPostgres starts a private throwaway cluster for this test. Use it when
// the test stops or restarts the server; tests that only need an isolated
// database should use PostgresDB. The cluster is stopped (immediate shutdown)
// and its files removed at t.Cleanup.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	begin := time.Now()
	p, err := newPostgres()
	if err != nil {
		t.Fatalf("testenv: start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := p.destroy(); err != nil {
			t.Errorf("testenv: remove PostgreSQL cluster: %v", err)
		}
	})
	t.Logf("testenv: PostgreSQL (%s) on 127.0.0.1:%d in %s, started in %v",
		p.bindir, p.port, p.dir, time.Since(begin).Round(time.Millisecond))
	return p
}

// URL returns the connection URL of database as the superuser "postgres".
func (p *Postgres) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.port, database)
}

// CreateDatabase creates a new, empty database with a unique name and returns
// its URL. The database is not dropped; it goes away with the cluster.
func (p *Postgres) CreateDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", dbNamePrefix(t.Name()), p.dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), pgQueryTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	return p.URL(name)
}

// Stop shuts the server down the way pg_ctl stop -m fast does (SIGINT: abort
// open transactions, checkpoint, exit) and waits for the postmaster to exit.
// The data directory is kept; Start brings the same cluster back.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	if p.shared {
		t.Fatalf("testenv: Stop on the shared cluster of PostgresDB would break other tests; use StartPostgres for a private cluster")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil {
		t.Fatalf("testenv: Stop: PostgreSQL on port %d is not running", p.port)
	}
	err := p.stopLocked(syscall.SIGINT, pgStopTimeout)
	if err != nil {
		t.Fatalf("testenv: stop PostgreSQL: %v", err)
	}
}

// Start starts the server again on the same port and data directory and
// waits until it accepts connections.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	if p.shared {
		t.Fatalf("testenv: Start on the shared cluster of PostgresDB; use StartPostgres for a private cluster")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil {
		t.Fatalf("testenv: Start: PostgreSQL on port %d is already running", p.port)
	}
	if err := p.startLocked(); err != nil {
		t.Fatalf("testenv: start PostgreSQL: %v", err)
	}
}

// Restart is Stop followed by Start.
func (p *Postgres) Restart(t testing.TB) {
	t.Helper()
	p.Stop(t)
	p.Start(t)
}

// The shared cluster: at most one per test binary, started on first use by
// PostgresDB and stopped by RunMain after m.Run.
var shared struct {
	mu      sync.Mutex
	running bool // inside RunMain
	pg      *Postgres
	err     error // the first start's failure, reported to every later caller
}

// RunMain runs the package's tests and then stops the shared cluster if
// PostgresDB started one. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m)) }
func RunMain(m *testing.M) int {
	shared.mu.Lock()
	shared.running = true
	shared.mu.Unlock()

	code := m.Run()

	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.running = false
	if shared.pg != nil {
		if err := shared.pg.destroy(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: remove shared PostgreSQL cluster: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		shared.pg = nil
	}
	return code
}

// PostgresDB returns the URL of a new, empty database in the test binary's
// shared cluster, starting the cluster on first use. The package must run its
// tests through RunMain, which stops the cluster at the end; without it the
// test fails rather than leak a postmaster.
func PostgresDB(t testing.TB) string {
	t.Helper()
	p, err := sharedPostgres()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p.CreateDatabase(t)
}

func sharedPostgres() (*Postgres, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.running {
		return nil, errors.New("PostgresDB needs the package's tests to run through testenv.RunMain, " +
			"which stops the shared cluster at the end; add\n\tfunc TestMain(m *testing.M) { os.Exit(testenv.RunMain(m)) }")
	}
	if shared.pg == nil && shared.err == nil {
		shared.pg, shared.err = newPostgres()
		if shared.err != nil {
			shared.err = fmt.Errorf("start shared PostgreSQL: %w", shared.err)
		} else {
			shared.pg.shared = true
		}
	}
	return shared.pg, shared.err
}

// newPostgres creates and starts a cluster. On failure nothing is left behind.
func newPostgres() (_ *Postgres, err error) {
	bindir, err := findPostgresBindir()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := makeClusterDir(cred)
	if err != nil {
		return nil, err
	}
	p := &Postgres{bindir: bindir, dir: dir, cred: cred}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()

	initdb := p.command("initdb",
		"-D", p.dataDir(),
		"-U", "postgres",
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
		"--no-sync",
	)
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}

	// Settings that hold for every start; the port is given on the command
	// line instead, because the first start may have to pick another one.
	conf := fmt.Sprintf(`
# testenv
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
`, strings.ReplaceAll(p.dir, "'", "''"))
	f, err := os.OpenFile(filepath.Join(p.dataDir(), "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
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
	// test binary starting its own cluster can win that race.
	for attempt := 1; ; attempt++ {
		if p.port, err = freePort(); err != nil {
			return nil, err
		}
		p.mu.Lock()
		err = p.startLocked()
		p.mu.Unlock()
		if err == nil {
			return p, nil
		}
		if attempt == 3 || !errors.Is(err, errPortInUse) {
			return nil, err
		}
	}
}

func (p *Postgres) dataDir() string { return filepath.Join(p.dir, "data") }
func (p *Postgres) logPath() string { return filepath.Join(p.dir, "server.log") }

// command prepares one of the server binaries to run as the server's OS user.
func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bindir, name), args...)
	cmd.Dir = p.dir // the postgres user may not be able to enter our working directory
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	return cmd
}

// startLocked starts the postmaster and waits until it accepts connections on
// its TCP port. p.mu is held.
func (p *Postgres) startLocked() error {
	logf, err := os.OpenFile(p.logPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	logStart, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if p.cred != nil {
		if err := logf.Chown(int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return err
		}
	}

	cmd := p.command("postgres", "-D", p.dataDir(), "-p", strconv.Itoa(p.port))
	cmd.Stdout = logf
	cmd.Stderr = logf
	// If the test binary dies without running its cleanups (a panic, the
	// -timeout alarm, SIGKILL), the kernel sends the postmaster SIGQUIT: an
	// immediate shutdown instead of a leaked server.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	if err := startOnPinnedThread(cmd); err != nil {
		return fmt.Errorf("run postgres: %w", err)
	}
	pm := &postmaster{cmd: cmd, exited: make(chan struct{})}
	go func() {
		pm.err = cmd.Wait()
		close(pm.exited)
	}()

	if err := p.waitReady(pm); err != nil {
		stopPostmaster(pm, syscall.SIGQUIT, pgKillTimeout)
		log := p.logSince(logStart)
		if strings.Contains(log, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return fmt.Errorf("%w\n--- server log ---\n%s", err, log)
	}
	p.proc = pm
	return nil
}

// waitReady polls until the server accepts a connection to its own data
// directory, the postmaster exits, or pgReadyTimeout passes.
func (p *Postgres) waitReady(pm *postmaster) error {
	ctx, cancel := context.WithTimeout(context.Background(), pgReadyTimeout)
	defer cancel()
	delay := time.Millisecond
	for {
		err := p.ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-pm.exited:
			return fmt.Errorf("postgres exited during start-up: %v", pm.err)
		case <-ctx.Done():
			return fmt.Errorf("postgres on port %d did not accept connections within %v: %v", p.port, pgReadyTimeout, err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// ping connects over TCP and checks that the server answering is ours, not
// another cluster that took the port.
func (p *Postgres) ping(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var dataDir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
		return err
	}
	if dataDir != p.dataDir() {
		return fmt.Errorf("%w: port %d is served by the cluster in %s", errPortInUse, p.port, dataDir)
	}
	return nil
}

// stopLocked signals the postmaster (SIGINT: fast shutdown, SIGQUIT:
// immediate) and waits for it to exit. p.mu is held.
func (p *Postgres) stopLocked(sig syscall.Signal, timeout time.Duration) error {
	pm := p.proc
	p.proc = nil
	select {
	case <-pm.exited:
		return fmt.Errorf("postgres had already exited: %v\n--- server log ---\n%s", pm.err, p.logSince(-1))
	default:
	}
	if err := stopPostmaster(pm, sig, timeout); err != nil {
		return fmt.Errorf("%w\n--- server log ---\n%s", err, p.logSince(-1))
	}
	return nil
}

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

// destroy stops the server (immediate shutdown) if it runs and removes the
// cluster's files.
func (p *Postgres) destroy() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	if p.proc != nil {
		pm := p.proc
		p.proc = nil
		errs = append(errs, stopPostmaster(pm, syscall.SIGQUIT, pgKillTimeout))
	}
	errs = append(errs, os.RemoveAll(p.dir))
	return errors.Join(errs...)
}

// logSince returns the server log written since offset (the last 40 lines
// at most); a negative offset means the whole log.
func (p *Postgres) logSince(offset int64) string {
	data, err := os.ReadFile(p.logPath())
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

// findPostgresBindir returns the folder of initdb and postgres: pg_config's
// answer, else the newest /usr/lib/postgresql/*/bin, preferring 15.
func findPostgresBindir() (string, error) {
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
	return "", fmt.Errorf("PostgreSQL server binaries (initdb, postgres) not found; "+
		"install the Debian package postgresql-15 (apt-get install postgresql-15); tried %s",
		strings.Join(tried, ", "))
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

// makeClusterDir creates the cluster's folder, owned by the server's user. It
// holds the unix socket, so its path must stay well under the 107 bytes of a
// socket address; and when the server runs as another user, every folder
// above it must be searchable by that user (t.TempDir's are not: 0700).
func makeClusterDir(cred *syscall.Credential) (string, error) {
	var tried []string
	for _, parent := range []string{os.TempDir(), "/tmp"} {
		if len(parent) > 60 {
			tried = append(tried, parent+" (too long for a unix socket path)")
			continue
		}
		if cred != nil {
			if err := searchableBy(parent, cred); err != nil {
				tried = append(tried, err.Error())
				continue
			}
		}
		dir, err := os.MkdirTemp(parent, "testenv-postgres-")
		if err != nil {
			return "", err
		}
		if cred != nil {
			if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
				os.RemoveAll(dir)
				return "", err
			}
		}
		return dir, nil
	}
	return "", fmt.Errorf("no folder for the cluster: %s", strings.Join(tried, "; "))
}

// searchableBy reports whether user cred can traverse dir and every folder
// above it. Supplementary groups are ignored: the server runs without them.
func searchableBy(dir string, cred *syscall.Credential) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		switch {
		case !ok:
		case st.Uid == cred.Uid && mode&0o100 != 0:
		case st.Uid != cred.Uid && st.Gid == cred.Gid && mode&0o010 != 0:
		case st.Uid != cred.Uid && st.Gid != cred.Gid && mode&0o001 != 0:
		default:
			return fmt.Errorf("%s (mode %v) is not searchable by uid %d", dir, mode, cred.Uid)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// dbNamePrefix turns a test name into the start of a database name: lower
// case letters, digits and underscores, short enough to leave room for a
// sequence number within PostgreSQL's 63-byte limit.
func dbNamePrefix(testName string) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 48 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// startOnPinnedThread starts cmd from a goroutine locked to its OS thread for
// the life of the process. Linux delivers Pdeathsig when the thread that
// forked the child exits, not when the process does, and the Go runtime may
// retire an ordinary thread; this one never exits.
func startOnPinnedThread(cmd *exec.Cmd) error {
	pinned.once.Do(func() {
		pinned.reqs = make(chan *exec.Cmd)
		pinned.errs = make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked
			for cmd := range pinned.reqs {
				pinned.errs <- cmd.Start()
			}
		}()
	})
	pinned.mu.Lock()
	defer pinned.mu.Unlock()
	pinned.reqs <- cmd
	return <-pinned.errs
}

var pinned struct {
	once sync.Once
	mu   sync.Mutex // one request at a time
	reqs chan *exec.Cmd
	errs chan error
}
