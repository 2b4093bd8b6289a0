package pgcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestACreatedClusterServesItsDatabasesAndDestroyLeavesNothing(t *testing.T) {
	ctx := context.Background()
	c, err := Create(ctx, Options{Prefix: "pgcluster-test-"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
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
