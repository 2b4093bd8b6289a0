// Package testdb gives a test its own PostgreSQL database with the project's
// schema: a new database in the test binary's shared throwaway cluster
// (testenv.PostgresDB) with every migration applied (migrations.Up).
//
// It is a package of its own, not part of testenv, because the migrations'
// own tests use testenv.
package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/internal/testenv"
	"github.com/snip/snip-jobs/migrations"
)

// URL returns the URL of a new database with the schema. The test's package
// must run its tests through testenv.RunMain.
func URL(t testing.TB) string {
	t.Helper()
	return Migrate(t, testenv.PostgresDB(t))
}

// Migrate applies the migrations to the database at url and returns url.
func Migrate(t testing.TB, url string) string {
	t.Helper()
	if _, err := migrations.Up(context.Background(), url, nil); err != nil {
		t.Fatalf("testdb: migrations: %v", err)
	}
	return url
}

// Pool returns a pool on url, closed when the test ends.
func Pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("testdb: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// New returns the URL of a new database with the schema, and a pool on it
// closed when the test ends.
func New(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	url := URL(t)
	return url, Pool(t, url)
}
