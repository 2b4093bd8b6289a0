// Package dbtest gives a test its own PostgreSQL database with the project's
// schema: a new database in the test binary's shared throwaway cluster
// (benchtest.PostgresDB) with every migration applied (migrations.Up).
//
// NewDB sets the database up as docs/operations.md ("Database roles") tells
// operators to: the two roles it creates (the SQL is read from that page and
// run as written, once per cluster), the schema migrated by the owner role, and
// the runtime role granted what the service needs (migrations.Grant). Tests run
// the service with DB.Runtime, so a missing grant fails them; their fixtures and
// checks use DB.Owner.
//
// URL, New, NewDB and NewDBIn do not migrate each database: they copy a
// template database (CREATE DATABASE … TEMPLATE) that was set up exactly so,
// once per cluster (benchtest.Postgres.Template), which costs a copy of files
// instead of twelve migrations. Migrate, Setup and Roles run the real steps
// on a database the test made: for the tests of the migrations themselves.
//
// It is a package of its own, not part of testenv, because the migrations'
// own tests use benchtest.
package dbtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/migrations"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// The roles of docs/operations.md.
const (
	OwnerRole   = "snip_jobs_owner"
	RuntimeRole = "snip_jobs"
)

// The template databases, one per way of setting a database up.
const (
	migratedTemplate = "tmpl_migrated" // URL: migrated by the superuser
	rolesTemplate    = "tmpl_roles"    // NewDB: Setup's roles, migration and grants
)

// URL returns the URL of a new database with the schema, as the superuser.
// The test's package must run its tests through benchtest.RunMain.
func URL(t testing.TB) string {
	t.Helper()
	pg := benchtest.SharedPostgres(t)
	if err := pg.Template(migratedTemplate, func(ctx context.Context, url string) error {
		_, err := migrations.Up(ctx, url, nil)
		return err
	}); err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return pg.CreateDatabaseFrom(t, migratedTemplate)
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
// closed when the test ends, both as the superuser.
func New(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	url := URL(t)
	return url, Pool(t, url)
}

// DB is a database set up with the two roles of docs/operations.md.
type DB struct {
	// Super connects as the superuser: for a test's fixtures and checks,
	// which may need to see what neither role may (other roles' sessions).
	Super string
	// Owner connects as the owner of the schema, which migrated it.
	Owner string
	// Runtime connects as the runtime role, with only the grants
	// migrations.Grant gives: what the service under test uses.
	Runtime string
}

// NewDB returns a new database migrated by the owner role, the runtime role
// granted what the service needs, in the test binary's shared cluster. The
// test's package must run its tests through benchtest.RunMain.
func NewDB(t testing.TB) DB {
	t.Helper()
	return NewDBIn(t, benchtest.SharedPostgres(t))
}

// NewDBIn is NewDB in the cluster pg (a private one, say).
func NewDBIn(t testing.TB, pg *benchtest.Postgres) DB {
	t.Helper()
	if err := pg.Template(rolesTemplate, func(ctx context.Context, url string) error {
		_, err := setup(ctx, url)
		return err
	}); err != nil {
		t.Fatalf("testdb: %v", err)
	}
	super := pg.CreateDatabaseFrom(t, rolesTemplate)
	owner, runtime, err := roleURLs(super)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return DB{Super: super, Owner: owner, Runtime: runtime}
}

// Setup is NewDB done step by step on the empty database at super, a
// superuser's URL: for tests of those steps.
func Setup(t testing.TB, super string) DB {
	t.Helper()
	db, err := setup(context.Background(), super)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return db
}

func setup(ctx context.Context, super string) (DB, error) {
	owner, runtime, err := roles(ctx, super)
	if err != nil {
		return DB{}, err
	}
	if _, err := migrations.Up(ctx, owner, nil); err != nil {
		return DB{}, fmt.Errorf("migrations: %w", err)
	}
	notes, err := migrations.Grant(ctx, owner, RuntimeRole)
	if err != nil || len(notes) > 0 {
		return DB{}, fmt.Errorf("grant the runtime role: %v %q", err, notes)
	}
	return DB{Super: super, Owner: owner, Runtime: runtime}, nil
}

// Roles sets up the database at url (a superuser's URL) as docs/operations.md
// says, before any migration: the roles (once per cluster) and their rights
// on the schema. It returns the URLs of the database as the owner and as the
// runtime role.
func Roles(t testing.TB, url string) (owner, runtime string) {
	t.Helper()
	owner, runtime, err := roles(context.Background(), url)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return owner, runtime
}

func roles(ctx context.Context, url string) (owner, runtime string, err error) {
	cluster, database, err := docsSQL()
	if err != nil {
		return "", "", err
	}
	if err := createRoles(ctx, url, cluster); err != nil {
		return "", "", fmt.Errorf("create the roles: %w", err)
	}
	if err := exec(ctx, url, database); err != nil {
		return "", "", fmt.Errorf("the roles' rights on the database: %w", err)
	}
	return roleURLs(url)
}

// createRoles runs the cluster's roles SQL unless both roles exist there.
// Roles belong to the cluster, not to a database; the cluster itself is
// asked (a port reused by a new cluster in one test binary has no roles).
// Two tests creating them at once: the loser's duplicate_object is success,
// and so is its unique_violation on pg_authid's name (what a CREATE ROLE
// racing another's uncommitted one gets, once that one commits).
func createRoles(ctx context.Context, dbURL, sql string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname = ANY($1)`, []string{OwnerRole, RuntimeRole}).Scan(&n)
	conn.Close(ctx)
	if err != nil || n == 2 {
		return err
	}
	err = exec(ctx, dbURL, sql)
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) &&
		(pe.Code == "42710" || pe.Code == "23505" && pe.ConstraintName == "pg_authid_rolname_index") { // duplicate_object, unique_violation
		return nil
	}
	return err
}

// Exec runs sql (several statements allowed) on a connection of its own, as
// whoever url logs in as; the test fails if it does not succeed.
func Exec(t testing.TB, url, sql string) {
	t.Helper()
	if err := exec(context.Background(), url, sql); err != nil {
		t.Fatal(err)
	}
}

func exec(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// roleURLs is the superuser's URL dbURL as the owner and as the runtime role.
func roleURLs(dbURL string) (owner, runtime string, err error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", "", err
	}
	as := func(role string) string {
		v := *u
		v.User = url.User(role)
		return v.String()
	}
	return as(OwnerRole), as(RuntimeRole), nil
}

// docsSQL reads docs/operations.md's SQL blocks for the roles: the one run
// once per cluster and the one run in the database.
func docsSQL() (cluster, database string, err error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", "", errors.New("cannot find docs/operations.md: no caller information")
	}
	path := filepath.Join(filepath.Dir(self), "..", "..", "docs", "operations.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	block := func(name string) (string, error) {
		re := regexp.MustCompile("(?s)<!-- sql: " + regexp.QuoteMeta(name) + "[ (][^\n]*-->\n```sql\n(.*?)```")
		m := re.FindSubmatch(doc)
		if m == nil {
			return "", fmt.Errorf("%s: no ```sql block after <!-- sql: %s -->", path, name)
		}
		return string(m[1]), nil
	}
	if cluster, err = block("roles-cluster"); err != nil {
		return "", "", err
	}
	database, err = block("roles-database")
	return cluster, database, err
}
