package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestACreatedClusterServesItsDatabasesAndDestroyLeavesNothing(t *testing.T) {
	ctx := context.Background()
	c := create(t)
	if !strings.HasPrefix(filepath.Base(c.Dir()), "pgcluster-test-") {
		t.Errorf("folder %s does not start with the prefix", c.Dir())
	}
	url, err := c.CreateDatabase(ctx, "snip")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var db string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil || db != "snip" {
		t.Fatalf("current_database() = %q, %v", db, err)
	}
	var autovacuum string
	if err := conn.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil || autovacuum != "off" {
		t.Errorf("autovacuum = %q, %v; want off unless Options.Autovacuum", autovacuum, err)
	}
	conn.Close(ctx)

	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there after Destroy (%v)", c.Dir(), err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(cctx, url); err == nil {
		conn.Close(ctx)
		t.Error("the server still answers after Destroy")
	}
	if err := c.Destroy(); err != nil {
		t.Errorf("a second Destroy: %v", err)
	}
}

func TestWithoutServerBinariesTheErrorNamesTheDebianPackage(t *testing.T) {
	_, err := Create(context.Background(), Options{Bindir: t.TempDir()})
	if !errors.Is(err, ErrNoServerBinaries) || !strings.Contains(err.Error(), "apt-get install postgresql-15") {
		t.Fatalf("Create with an empty bindir: %v; want ErrNoServerBinaries naming postgresql-15", err)
	}
}

// Clusters after the first start from a copy of its initdb output; each must
// still be a database system of its own, as the aggregator's restore guard
// (pg_control_system()) and PostgreSQL's own WAL checks expect.
func TestEveryClusterHasASystemIdentifierOfItsOwn(t *testing.T) {
	ctx := context.Background()
	seen := map[int64]string{}
	for range 3 {
		c := create(t)
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		var id int64
		err = conn.QueryRow(ctx, `SELECT system_identifier FROM pg_control_system()`).Scan(&id)
		conn.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := seen[id]; ok {
			t.Fatalf("%s and %s share the system identifier %d", other, c.Dir(), id)
		}
		seen[id] = c.Dir()
		// A restart reads the WAL again: the rewritten headers must agree.
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CreateDatabase(ctx, "after_restart"); err != nil {
			t.Fatalf("housekeeping after a restart: %v", err)
		}
	}
	pristine, err := pristinePath(mustBindir(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pristine, "global", "pg_control")); err != nil {
		t.Errorf("no initdb output kept in the cache: %v", err)
	}
}

func TestASystemIdentifierIsRewrittenOnlyInAControlFileThisCodeKnows(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "global"), 0o700); err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 8192) // no CRC-32C of what precedes it anywhere
	for i := range junk {
		junk[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(dir, "global", "pg_control"), junk, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := newSystemIdentifier(dir, 42); err == nil || !strings.Contains(err.Error(), "not a pg_control") {
		t.Fatalf("newSystemIdentifier on junk: %v; want an error saying it is not a pg_control", err)
	}
}

func mustBindir(t *testing.T) string {
	dir, err := FindBindir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// A connection costs ~50 ms of CPU here: creating databases one after another
// goes through the connections already open, not a new one each.
func TestCreatingDatabasesOpensNoConnectionPerStatement(t *testing.T) {
	ctx := context.Background()
	c := create(t)
	if _, err := c.CreateDatabase(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var since time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := c.CreateDatabase(ctx, fmt.Sprintf("db_%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var opened, open int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE backend_start > $1), count(*) FROM pg_stat_activity
		WHERE datname = 'postgres' AND pid <> pg_backend_pid()`, since).Scan(&opened, &open); err != nil {
		t.Fatal(err)
	}
	if opened != 0 || open == 0 || open > adminConns {
		t.Errorf("10 databases created: %d connections opened meanwhile, %d open; want 0 opened and 1 to %d open", opened, open, adminConns)
	}
}

// create makes a cluster the test destroys when it ends.
func create(t *testing.T) *Cluster {
	t.Helper()
	c, err := Create(context.Background(), Options{Prefix: "pgcluster-test-"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}
