// Package migrations holds the PostgreSQL schema of snip-jobs as SQL files
// embedded in the binary, and applies them.
//
// Files are named NNNN_name.sql (four digits, then a lower-case name) and use
// goose's annotations (-- +goose Up, -- +goose Down). Every file in this folder
// is picked up; a .sql file whose name does not follow the pattern is an error
// rather than silently skipped (goose alone would skip it). Each migration runs
// in its own transaction unless it says -- +goose NO TRANSACTION.
//
// What is guaranteed: Up applies every pending migration, in version order,
// exactly once per database, even when several servers call it at the same
// time. The caller that takes goose's session-level advisory lock applies
// them; the others wait for the lock and then find nothing to do. goose records
// each applied version in its table goose_db_version. A migration that fails
// is rolled back (when it runs in a transaction) and stops the run; the ones
// before it stay applied, and the error names the failing file. Connecting is
// bounded by a timeout (the URL's connect_timeout, else 10 s), so an
// unreachable database gives an error, not a hang. The database URL is never
// logged nor put in an error: it may hold a password.
//
// Check compares the database with this binary's migrations without the lock
// and without writing: `run` uses it at start to refuse a schema that is
// behind (pending migrations) and to warn about one that is ahead.
//
// What is NOT guaranteed: that the lock wait is short. goose polls for the
// advisory lock (here once a second, for up to 30 minutes) instead of queueing
// on it, so a waiting server notices the lock's release up to a second late,
// and a long migration on another server holds every other server's start-up;
// the caller's context is the real bound. There is no automatic Down: rolling
// back is a deliberate act. A migration that ran with NO TRANSACTION and
// failed half-way leaves its partial effects. Migrations recorded in the
// database but absent from this binary (a newer binary ran them) are ignored,
// while a file older than the newest applied version that was never applied
// (added out of order) is an error.
package migrations

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var embedded embed.FS

const (
	// defaultConnectTimeout bounds each connection attempt (dial, TLS, start-up
	// and authentication) when the URL has no connect_timeout. pgx has no
	// default: without one a server that accepts but never answers hangs the
	// caller for as long as its context allows.
	defaultConnectTimeout = 10 * time.Second

	// goose's session locker polls pg_try_advisory_lock; its defaults are every
	// 5 s, 60 times. Once a second (goose's minimum), for up to 30 minutes.
	lockPollSeconds = 1
	lockPolls       = 30 * 60
)

// fileName is the pattern of a migration file's name; version 0000 is
// goose's own (the empty schema) and is refused too.
var fileName = regexp.MustCompile(`^[0-9]{4}_[a-z0-9_]+\.sql$`)

// Result is what one Up call did.
type Result struct {
	// Applied lists the versions this call applied, in ascending order. It is
	// empty when the schema was already up to date (perhaps because another
	// server applied the pending migrations while this one waited for the lock).
	Applied []int64
	// Current is the highest version recorded in the database after the call.
	Current int64
}

// MigrationStatus is the state of one migration file of this binary.
type MigrationStatus struct {
	Version   int64
	Name      string    // file name, e.g. "0001_fencing.sql"
	Applied   bool      // false: pending
	AppliedAt time.Time // when it was applied (UTC); zero while pending
}

// Up applies all pending migrations to the database at databaseURL and says
// which it applied. log receives one line per applied migration and a summary;
// nil discards them. On failure the Result still lists what this call applied
// before the failing migration.
func Up(ctx context.Context, databaseURL string, log *slog.Logger) (Result, error) {
	return up(ctx, databaseURL, log, options{fsys: embedded})
}

// Status reports every migration file of this binary, in version order, as
// applied (with its time) or pending. It takes the same lock as Up, so it
// waits while a migration runs elsewhere; on a database never migrated it
// creates goose's (empty) version table, as every goose command does.
func Status(ctx context.Context, databaseURL string) ([]MigrationStatus, error) {
	return status(ctx, databaseURL, options{fsys: embedded})
}

// Comparison is how the database's applied migrations compare with this
// binary's.
type Comparison struct {
	// Current is the highest version applied to the database; 0 when none is.
	Current int64
	// Pending lists the files of this binary's migrations that the database
	// has not applied, in version order: the binary needs them.
	Pending []string
	// Unknown lists the versions applied to the database that this binary
	// has no file for, in ascending order: a newer binary applied them (a
	// rolling upgrade in progress, or a binary rolled back).
	Unknown []int64
	// Missing lists the privileges the connected role lacks of those the
	// service needs on the schema (GrantSQL), as "INSERT on job_runs":
	// `snip-jobs migrate --grant-to ROLE` (Grant) gives them. Empty for the
	// schema's owner; only read when nothing is Pending.
	Missing []string
}

// Check compares the database at databaseURL with this binary's migrations.
// It only reads: it takes no lock (so it neither waits for a migration
// running elsewhere nor holds one up, and sees only what is committed), and
// on a database never migrated it creates nothing and reports every
// migration pending. A version counts as applied when goose's table records
// it, as for Up and Status.
func Check(ctx context.Context, databaseURL string) (Comparison, error) {
	return check(ctx, databaseURL, options{fsys: embedded})
}

// options are the knobs tests turn; production uses the zero values except
// fsys, which is the embedded folder.
type options struct {
	fsys           fs.FS
	connectTimeout time.Duration // 0: defaultConnectTimeout
}

func up(ctx context.Context, databaseURL string, log *slog.Logger, o options) (Result, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p, closeDB, err := open(ctx, databaseURL, o)
	if err != nil {
		return Result{}, err
	}
	defer closeDB()

	var res Result
	applied, err := p.Up(ctx)
	var partial *goose.PartialError
	if errors.As(err, &partial) {
		res.Applied = logApplied(ctx, log, partial.Applied)
		failed := path.Base(partial.Failed.Source.Path)
		log.ErrorContext(ctx, "migration failed", "version", partial.Failed.Source.Version, "file", failed, "err", partial.Err)
		return res, fmt.Errorf("migrations: %s failed (%d earlier migration(s) of this run were applied and stay applied): %w",
			failed, len(partial.Applied), partial.Err)
	}
	if err != nil {
		return res, fmt.Errorf("migrations: up: %w", err)
	}
	res.Applied = logApplied(ctx, log, applied)

	// Without the lock: it only reads, and must not wait behind a newer
	// binary's migration that started after ours finished.
	res.Current, _, err = p.GetVersions(ctx)
	if err != nil {
		return res, fmt.Errorf("migrations: read current version: %w", err)
	}
	if len(res.Applied) == 0 {
		log.InfoContext(ctx, "database schema up to date", "version", res.Current)
	} else {
		log.InfoContext(ctx, "database schema migrated", "applied", len(res.Applied), "version", res.Current)
	}
	return res, nil
}

func logApplied(ctx context.Context, log *slog.Logger, results []*goose.MigrationResult) []int64 {
	versions := make([]int64, 0, len(results))
	for _, r := range results {
		versions = append(versions, r.Source.Version)
		log.InfoContext(ctx, "migration applied",
			"version", r.Source.Version, "file", path.Base(r.Source.Path), "duration", r.Duration)
	}
	return versions
}

func status(ctx context.Context, databaseURL string, o options) ([]MigrationStatus, error) {
	p, closeDB, err := open(ctx, databaseURL, o)
	if err != nil {
		return nil, err
	}
	defer closeDB()
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	out := make([]MigrationStatus, 0, len(st))
	for _, s := range st {
		m := MigrationStatus{Version: s.Source.Version, Name: path.Base(s.Source.Path)}
		if s.State == goose.StateApplied {
			m.Applied = true
			m.AppliedAt = s.AppliedAt.UTC()
		}
		out = append(out, m)
	}
	return out, nil
}

func check(ctx context.Context, databaseURL string, o options) (Comparison, error) {
	files, err := migrationFiles(o.fsys)
	if err != nil {
		return Comparison{}, err
	}
	cfg, err := connConfig(databaseURL, cmp.Or(o.connectTimeout, defaultConnectTimeout))
	if err != nil {
		return Comparison{}, err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return Comparison{}, fmt.Errorf("migrations: cannot reach PostgreSQL: %w", err)
	}
	store, err := database.NewStore(database.DialectPostgres, goose.DefaultTablename)
	if err != nil {
		return Comparison{}, fmt.Errorf("migrations: %w", err)
	}
	applied := map[int64]bool{}
	ext, ok := store.(database.StoreExtender)
	if !ok {
		return Comparison{}, errors.New("migrations: goose's store cannot tell whether its table exists")
	}
	// goose's own check: its table in the session's current schema.
	exists, err := ext.TableExists(ctx, db)
	if err != nil {
		return Comparison{}, fmt.Errorf("migrations: look for %s: %w", goose.DefaultTablename, err)
	}
	if exists {
		rows, err := store.ListMigrations(ctx, db)
		if err != nil {
			return Comparison{}, fmt.Errorf("migrations: read %s: %w", goose.DefaultTablename, err)
		}
		for _, r := range rows {
			if r.Version > 0 { // 0 is goose's own row
				applied[r.Version] = true
			}
		}
	}
	var c Comparison
	known := map[int64]bool{}
	for _, f := range files {
		known[f.version] = true
		if !applied[f.version] {
			c.Pending = append(c.Pending, f.name)
		}
	}
	for v := range applied {
		c.Current = max(c.Current, v)
		if !known[v] {
			c.Unknown = append(c.Unknown, v)
		}
	}
	slices.Sort(c.Unknown)
	if len(c.Pending) == 0 {
		if c.Missing, err = missingPrivileges(ctx, db); err != nil {
			return Comparison{}, err
		}
	}
	return c, nil
}

// migrationFile is one migration file of a folder checkFiles accepted.
type migrationFile struct {
	version int64
	name    string
}

// migrationFiles checks the folder's migration files and lists them in
// version order.
func migrationFiles(fsys fs.FS) ([]migrationFile, error) {
	if err := checkFiles(fsys); err != nil {
		return nil, err
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: list files: %w", err)
	}
	files := make([]migrationFile, 0, len(names))
	for _, n := range names {
		v, err := strconv.ParseInt(n[:4], 10, 64) // checkFiles: NNNN_name.sql
		if err != nil {
			return nil, fmt.Errorf("migrations: %s: %w", n, err)
		}
		files = append(files, migrationFile{version: v, name: n})
	}
	slices.SortFunc(files, func(a, b migrationFile) int { return cmp.Compare(a.version, b.version) })
	return files, nil
}

// open checks the migration files, connects (checking that the server
// answers) and returns a goose provider over the connection pool, and the
// function that closes the pool.
func open(ctx context.Context, databaseURL string, o options) (*goose.Provider, func(), error) {
	if err := checkFiles(o.fsys); err != nil {
		return nil, nil, err
	}
	cfg, err := connConfig(databaseURL, cmp.Or(o.connectTimeout, defaultConnectTimeout))
	if err != nil {
		return nil, nil, err
	}
	db := stdlib.OpenDB(*cfg)
	closeDB := func() { _ = db.Close() }
	if err := db.PingContext(ctx); err != nil {
		closeDB()
		return nil, nil, fmt.Errorf("migrations: cannot reach PostgreSQL: %w", err)
	}
	p, err := newProvider(db, o.fsys)
	if err != nil {
		closeDB()
		return nil, nil, err
	}
	return p, closeDB, nil
}

// connConfig parses the URL and bounds connecting. The session's time zone is
// pinned to UTC: goose records when a migration was applied in a column of
// type timestamp (without time zone) filled by now(), that is in the
// session's zone, and reads it back as if it were UTC.
//
// The URL is the service's, which may carry the pool's own settings
// (pool_max_conns and the other pool_* keys, docs/operations.md): parsed by
// the pool's parser, which takes them out (and checks them), so that they are
// not sent to PostgreSQL as run-time parameters, which it refuses (FATAL:
// unrecognized configuration parameter).
func connConfig(databaseURL string, connectTimeout time.Duration) (*pgx.ConnConfig, error) {
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		// pgx's message quotes the URL with the password masked "best effort"
		// (pgconn.ParseConfigError), and the error it wraps may quote it whole.
		return nil, errors.New("migrations: the database URL cannot be parsed (not shown: it may hold a password)")
	}
	cfg := pc.ConnConfig
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	for k := range cfg.RuntimeParams {
		if strings.EqualFold(k, "timezone") {
			delete(cfg.RuntimeParams, k)
		}
	}
	cfg.RuntimeParams["timezone"] = "UTC"
	return cfg, nil
}

func newProvider(db *sql.DB, fsys fs.FS) (*goose.Provider, error) {
	// A new locker for every provider: its retry budget is counted across all
	// of its SessionLock calls and never reset.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(lockPollSeconds, lockPolls))
	if err != nil {
		return nil, fmt.Errorf("migrations: session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker),
		// goose's global registry of Go migrations is process-wide state that
		// any imported package could add to; this schema is the files only.
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// checkFiles rejects a folder whose .sql files goose would misread: a name
// outside NNNN_name.sql (goose silently skips names it cannot number) or two
// files with one version.
func checkFiles(fsys fs.FS) error {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return fmt.Errorf("migrations: list files: %w", err)
	}
	byVersion := make(map[string]string)
	var bad []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		if !fileName.MatchString(name) || strings.HasPrefix(name, "0000") {
			bad = append(bad, name)
			continue
		}
		v := name[:4]
		if other, ok := byVersion[v]; ok {
			return fmt.Errorf("migrations: %s and %s have the same version %s", other, name, v)
		}
		byVersion[v] = name
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("migrations: file name(s) %s do not match NNNN_name.sql (four digits, an underscore, lower-case letters, digits and underscores)",
			strings.Join(bad, ", "))
	}
	if len(byVersion) == 0 {
		return errors.New("migrations: no migration files")
	}
	return nil
}
