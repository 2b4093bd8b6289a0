package main

import (
	"context"
	"database/sql"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for goose
	"github.com/pressly/goose/v3"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// migrateAllButNewest gives the database at url the previous binary's schema
// (every migration but the newest) and the pulse job's table; it returns the
// migrations applied and the newest one's name.
func migrateAllButNewest(t *testing.T, url string) (fstest.MapFS, string) {
	t.Helper()
	files, newest := repoMigrations(t)
	delete(files, newest)
	gooseUp(t, url, files)
	dbtest.Exec(t, url, pulsesTable)
	return files, newest
}

// Without migrate_on_start, run compares the schema with its migrations: a
// database without the newest one (the previous binary's schema) is refused
// before any job runs, naming the file and the command that applies it; once
// migrated, run starts and its fenced writes go through. A database that a
// newer binary migrated further is only warned about (rolling upgrades).
func TestRunRefusesASchemaWithoutItsNewestMigrationUntilMigrated(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	url := benchtest.PostgresDB(t)
	env := dbEnv(url)
	c := config{instance: "server-a", endpoints: []string{etcd.Endpoint(0)}, jobs: pulseJob}
	files, newest := migrateAllButNewest(t, url)

	in := start(t, c, env)
	if code := in.wait(); code != 1 {
		t.Fatalf("run on a schema without %s: exit %d, want 1", newest, code)
	}
	checkRefused(t, in, newest)
	for _, msg := range []string{"lease granted", "running"} {
		if lines := linesWith(in.logs(), `"msg":"`+msg+`"`); len(lines) != 0 {
			t.Errorf("run got as far as %q on a schema without %s: %s", msg, newest, lines)
		}
	}

	if r := snip(t, env, "migrate", "--config", in.config); r.code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	in = start(t, c, env)
	in.waitReady()
	waitPulses(t, url, "a pulse through the fence", func() bool { return len(pulses(t, url)) > 0 })
	if lines := linesWith(in.logs(), `"level":"WARN"`, "does not know"); len(lines) != 0 {
		t.Errorf("a warning about unknown migrations on an up-to-date schema: %s", lines)
	}
	stop(t, in)

	// A newer binary migrated further: a version this one does not know.
	files[newest] = readMigration(t, newest)
	files["9999_future.sql"] = &fstest.MapFile{Data: []byte("-- +goose Up\nCREATE TABLE future (id int);\n")}
	gooseUp(t, url, files)
	in = start(t, c, env)
	in.waitReady()
	if lines := linesWith(in.logs(), `"level":"WARN"`, "does not know", `"unknown_versions":[9999]`); len(lines) != 1 {
		t.Errorf("no warning naming the unknown version 9999:\n%s", in.logs())
	}
	stop(t, in)
}

// A database that does not answer at start is not fatal, as before the
// schema was compared at start: run starts its jobs, compares the schema once
// PostgreSQL answers, and then stops if the schema lacks a migration, or
// carries on when it does not. It is not ready (/readyz) until it compared.
func TestRunComparesTheSchemaOncePostgresAnswers(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	pg := benchtest.StartPostgres(t)
	url := pg.CreateDatabase(t)
	env := dbEnv(url)
	c := config{instance: "server-a", endpoints: []string{etcd.Endpoint(0)}, jobs: pulseJob}
	_, newest := migrateAllButNewest(t, url)

	pg.Stop(t)
	in := start(t, c, env)
	waitRunning(t, in)
	pg.Start(t)
	if code := in.wait(); code != 1 {
		t.Fatalf("run on a schema without %s, once PostgreSQL answered: exit %d, want 1", newest, code)
	}
	checkRefused(t, in, newest)

	if r := snip(t, env, "migrate", "--config", in.config); r.code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	pg.Stop(t)
	in = start(t, c, env)
	waitRunning(t, in)
	if code, body := in.get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: schema: not yet compared") {
		t.Errorf("/readyz before the schema was compared: %d %q; want 503 naming the schema", code, body)
	}
	pg.Start(t)
	in.waitReady()
	if n := len(linesWith(in.logs(), "the database schema has every migration this binary needs")); n != 1 {
		t.Errorf("ready before the schema was compared (%d lines saying it was):\n%s", n, in.logs())
	}
	waitPulses(t, url, "a pulse through the fence", func() bool { return len(pulses(t, url)) > 0 })
	stop(t, in)
}

// checkRefused checks that the exited instance said which migration its
// database lacks and how to apply it.
func checkRefused(t *testing.T, in *instance, missing string) {
	t.Helper()
	logs := in.logs()
	for _, want := range []string{
		"the database schema lacks 1 migration(s) this binary needs: " + missing + " ",
		"apply them with `snip-jobs migrate --config " + in.config + "`",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("run's output lacks %q:\n%s", want, logs)
		}
	}
}

// waitRunning waits for the instance to say it runs its jobs.
func waitRunning(t *testing.T, in *instance) {
	t.Helper()
	eventually(t, in.name+" running its jobs while PostgreSQL is down", func() bool {
		if !in.running() {
			t.Fatalf("%s exited (%v) while PostgreSQL was down:\n%s", in.name, in.state(), in.logs())
		}
		return len(linesWith(in.logs(), `"msg":"running"`)) == 1
	})
}

// stop ends the instance with SIGTERM and expects a clean exit.
func stop(t *testing.T, in *instance) {
	t.Helper()
	in.signal(syscall.SIGTERM)
	if code := in.wait(); code != 0 {
		t.Fatalf("%s: exit %d after SIGTERM", in.name, code)
	}
}

// repoMigrations returns the repository's migration files (the ones built
// into the binary) and the name of the newest.
func repoMigrations(t *testing.T) (fstest.MapFS, string) {
	t.Helper()
	names, err := fs.Glob(os.DirFS("../../migrations"), "*.sql")
	if err != nil || len(names) < 2 {
		t.Fatalf("migration files: %v %v", names, err)
	}
	slices.Sort(names) // NNNN_name.sql: in version order
	files := fstest.MapFS{}
	for _, n := range names {
		files[n] = readMigration(t, n)
	}
	return files, names[len(names)-1]
}

func readMigration(t *testing.T, name string) *fstest.MapFile {
	t.Helper()
	data, err := os.ReadFile("../../migrations/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return &fstest.MapFile{Data: data}
}

// gooseUp applies files to the database with goose, as the migrate command of
// a binary built with those files does.
func gooseUp(t *testing.T, url string, files fs.FS) {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(context.Background()); err != nil {
		t.Fatalf("goose up: %v", err)
	}
}

// The database URL's pool settings (pool_max_conns, as docs/operations.md
// says) are the pool's, never sent to PostgreSQL: migrate (with --grant-to,
// and --status) works with them in the owner's URL, and run with them in the
// runtime role's compares the schema, gets ready and writes.
func TestPoolMaxConnsInTheDatabaseURLWorksForMigrateAndTheSchemaCheck(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	owner, runtime := dbtest.Roles(t, benchtest.PostgresDB(t))
	c := config{instance: "server-a", endpoints: []string{etcd.Endpoint(0)}, jobs: pulseJob}
	path := writeConfig(t, c)
	for _, args := range [][]string{{"migrate", "--grant-to", dbtest.RuntimeRole}, {"migrate", "--status"}} {
		if r := snip(t, dbEnv(withQuery(owner, "pool_max_conns=4")), append(args, "--config", path)...); r.code != 0 {
			t.Fatalf("%s with pool_max_conns in the URL: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	dbtest.Exec(t, owner, pulsesTable+"; GRANT SELECT, INSERT ON pulses TO "+dbtest.RuntimeRole+"; GRANT USAGE ON SEQUENCE pulses_id_seq TO "+dbtest.RuntimeRole)
	in := start(t, c, dbEnv(withQuery(runtime, "pool_max_conns=4")))
	in.waitReady()
	if n := len(linesWith(in.logs(), "the database schema has every migration this binary needs")); n != 1 {
		t.Errorf("ready, but %d lines say the schema was compared:\n%s", n, in.logs())
	}
	waitPulses(t, owner, "a pulse through the fence", func() bool { return len(pulses(t, owner)) > 0 })
	stop(t, in)
}

// withQuery adds kv (key=value) to the URL's query.
func withQuery(url, kv string) string {
	if strings.Contains(url, "?") {
		return url + "&" + kv
	}
	return url + "?" + kv
}

// `migrate --grant-fence-to ROLE`, as the owner, gives a program's role the
// fence (snip_jobs_fence) and nothing else: the role fences its writes and
// cannot write fencing_tokens by hand. With --status it is bad usage.
func TestMigrateGrantFenceToGivesAProgramsRoleTheFenceAndNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := benchtest.PostgresDB(t)
	owner, _ := dbtest.Roles(t, url)
	const role = "nightly_export"
	dbtest.Exec(t, url, `DO $$ BEGIN CREATE ROLE nightly_export LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`) // roles are the cluster's
	path := writeConfig(t, config{instance: "server-a", endpoints: []string{"https://127.0.0.1:1"}})

	if r := snip(t, dbEnv(owner), "migrate", "--status", "--grant-fence-to", role, "--config", path); r.code != 2 || !strings.Contains(r.stderr, "--status changes nothing") {
		t.Errorf("migrate --status --grant-fence-to: exit %d, want 2 (usage)\n%s", r.code, r.stderr)
	}
	r := snip(t, dbEnv(owner), "migrate", "--grant-to", dbtest.RuntimeRole, "--grant-fence-to", role, "--config", path)
	if r.code != 0 || !strings.Contains(r.stdout, "granted role "+dbtest.RuntimeRole+" what the service needs\n") ||
		!strings.Contains(r.stdout, "granted role "+role+" the fence (snip_jobs_fence)\n") {
		t.Fatalf("migrate --grant-to --grant-fence-to: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	prog, err := sql.Open("pgx", strings.Replace(url, "postgres://postgres@", "postgres://"+role+"@", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	tx, err := prog.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT snip_jobs_fence('export:nightly', 3, 'server-a')`); err != nil {
		t.Fatalf("as %s, the fence: %v", role, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := prog.ExecContext(ctx, `UPDATE fencing_tokens SET token = 1`); err == nil || !strings.Contains(err.Error(), "permission denied for table fencing_tokens") {
		t.Errorf("as %s, UPDATE fencing_tokens: %v; want PostgreSQL's refusal", role, err)
	}
}
