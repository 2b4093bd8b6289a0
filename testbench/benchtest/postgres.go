package benchtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/pgcluster"
)

// Postgres is a throwaway PostgreSQL cluster (package pgcluster): its own data
// directory, its own postmaster listening on 127.0.0.1 on a free port, trust
// authentication for the superuser role "postgres". Durability is switched off
// (fsync, synchronous_commit and full_page_writes are off): a Stop or Restart
// keeps committed data, an OS crash would not.
type Postgres struct {
	c      *pgcluster.Cluster
	shared bool // the cluster behind PostgresDB: Stop and Start are refused

	dbSeq     atomic.Int64 // CreateDatabase names
	templates sync.Map     // name → *template
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
		t.Fatalf("benchtest: start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := p.c.Destroy(); err != nil {
			t.Errorf("benchtest: remove PostgreSQL cluster: %v", err)
		}
	})
	t.Logf("benchtest: PostgreSQL (%s) on 127.0.0.1:%d in %s, started in %v",
		p.c.Bindir(), p.c.Port(), p.c.Dir(), time.Since(begin).Round(time.Millisecond))
	return p
}

func newPostgres() (*Postgres, error) {
	c, err := pgcluster.Create(context.Background(), pgcluster.Options{Prefix: "testenv-postgres-"})
	if err != nil {
		return nil, err
	}
	return &Postgres{c: c}, nil
}

// URL returns the connection URL of database as the superuser "postgres".
func (p *Postgres) URL(database string) string { return p.c.URL(database) }

// CreateDatabase creates a new, empty database with a unique name and returns
// its URL. The database is not dropped; it goes away with the cluster.
func (p *Postgres) CreateDatabase(t testing.TB) string {
	t.Helper()
	url, err := p.c.CreateDatabase(context.Background(), p.dbName(t))
	if err != nil {
		t.Fatalf("benchtest: %v", err)
	}
	return url
}

// dbName is a new database name for the test t, unique in the cluster.
func (p *Postgres) dbName(t testing.TB) string {
	return fmt.Sprintf("%s_%d", dbNamePrefix(t.Name()), p.dbSeq.Add(1))
}

// Stop shuts the server down the way pg_ctl stop -m fast does (SIGINT: abort
// open transactions, checkpoint, exit) and waits for the postmaster to exit.
// The data directory is kept; Start brings the same cluster back.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	if p.shared {
		t.Fatalf("benchtest: Stop on the shared cluster of PostgresDB would break other tests; use StartPostgres for a private cluster")
	}
	if err := p.c.Stop(); err != nil {
		t.Fatalf("benchtest: stop PostgreSQL: %v", err)
	}
}

// Start starts the server again on the same port and data directory and
// waits until it accepts connections.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	if p.shared {
		t.Fatalf("benchtest: Start on the shared cluster of PostgresDB; use StartPostgres for a private cluster")
	}
	if err := p.c.Start(context.Background()); err != nil {
		t.Fatalf("benchtest: start PostgreSQL: %v", err)
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
	err     error    // the first start's failure, reported to every later caller
	after   []func() // AfterTests
}

// RunMain runs the package's tests and then stops what the test binary
// shared: what AfterTests was given, and the PostgreSQL cluster if
// PostgresDB started one. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }
func RunMain(m *testing.M) int {
	shared.mu.Lock()
	shared.running = true
	shared.mu.Unlock()

	code := m.Run()

	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.running = false
	for i := len(shared.after) - 1; i >= 0; i-- {
		shared.after[i]()
	}
	shared.after = nil
	if shared.pg != nil {
		if err := shared.pg.c.Destroy(); err != nil {
			fmt.Fprintf(os.Stderr, "benchtest: remove shared PostgreSQL cluster: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
		shared.pg = nil
	}
	return code
}

// AfterTests has RunMain call f once the package's tests are over (the last
// registered first, before the shared PostgreSQL cluster stops): how another
// server that a test binary shares, started on first use, is stopped
// (kubetest.Shared). Outside RunMain it returns an error, and the caller
// should not start what nobody would stop.
func AfterTests(f func()) error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.running {
		return errors.New("a server shared by the test binary needs the package's tests to run through benchtest.RunMain, " +
			"which stops it at the end; add\n\tfunc TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }")
	}
	shared.after = append(shared.after, f)
	return nil
}

// PostgresDB returns the URL of a new, empty database in the test binary's
// shared cluster, starting the cluster on first use. The package must run its
// tests through RunMain, which stops the cluster at the end; without it the
// test fails rather than leak a postmaster.
func PostgresDB(t testing.TB) string {
	t.Helper()
	return SharedPostgres(t).CreateDatabase(t)
}

func sharedPostgres() (*Postgres, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.running {
		return nil, errors.New("PostgresDB needs the package's tests to run through benchtest.RunMain, " +
			"which stops the shared cluster at the end; add\n\tfunc TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }")
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
