package migrations_test

import (
	"context"
	"errors"
	neturl "net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/snip/snip-jobs/migrations"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// docs/operations.md shows the grants the binary gives, as it gives them.
func TestTheRuntimeGrantsInTheDocsAreTheBinarys(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- sql: runtime-grants[^\n]*-->\n```sql\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/operations.md has no runtime-grants SQL block")
	}
	if want := migrations.GrantSQL(dbtest.RuntimeRole); string(m[1]) != want {
		t.Errorf("docs/operations.md's grants:\n%s\nthe binary's (migrations.GrantSQL):\n%s", m[1], want)
	}
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// notGranted are the schema's relations the runtime role has no use for.
var notGranted = []string{
	"goose_db_version_id_seq", // only migrate records versions
}

// Every table and sequence the migrations create is granted to the runtime
// role (in some way) or listed in notGranted, so a migration that adds one
// must decide what the role may do with it.
func TestEveryTableOfTheSchemaIsGrantedToTheRuntimeRole(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	rows, err := connect(t, db.Owner).Query(context.Background(), `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S')
		  AND NOT (has_table_privilege($1, c.oid, 'SELECT') OR has_table_privilege($1, c.oid, 'INSERT')
		        OR has_table_privilege($1, c.oid, 'UPDATE') OR has_table_privilege($1, c.oid, 'DELETE')
		        OR (c.relkind = 'S' AND has_sequence_privilege($1, c.oid, 'USAGE')))
		ORDER BY 1`, dbtest.RuntimeRole)
	if err != nil {
		t.Fatal(err)
	}
	forgotten, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	forgotten = slices.DeleteFunc(forgotten, func(r string) bool { return slices.Contains(notGranted, r) })
	if len(forgotten) > 0 {
		t.Errorf("the runtime role has no privilege on %v: add them to migrations.runtimeGrants", forgotten)
	}
}

// The runtime role reads and writes rows; it cannot change the schema, empty
// a table or switch off the trigger that guards click_events. run's check
// finds its grants complete, and names what one revoked grant takes away.
func TestTheRuntimeRoleCannotChangeTheSchemaAndAMissingGrantIsNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	rt := connect(t, db.Runtime)
	for _, stmt := range []string{
		"CREATE TABLE intruder (x int)",
		"TRUNCATE job_runs",
		"ALTER TABLE click_events DISABLE TRIGGER click_events_xid_is_the_inserter",
		"DROP TABLE fencing_tokens",
		"UPDATE links SET slug = 'x'",
		"INSERT INTO click_events (link_id, clicked_at) VALUES (1, now())",
		"DELETE FROM fencing_tokens",
	} {
		if _, err := rt.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "SQLSTATE 42") {
			t.Errorf("as the runtime role, %q: %v; want a refusal", stmt, err)
		}
	}
	c, err := migrations.Check(ctx, db.Runtime)
	if err != nil || len(c.Pending) > 0 || len(c.Missing) > 0 {
		t.Fatalf("Check as the runtime role: %+v, %v; want nothing pending or missing", c, err)
	}
	if _, err := connect(t, db.Owner).Exec(ctx, "REVOKE INSERT ON job_runs FROM "+dbtest.RuntimeRole+"; REVOKE USAGE ON SEQUENCE cron_claim_tokens FROM "+dbtest.RuntimeRole); err != nil {
		t.Fatal(err)
	}
	c, err = migrations.Check(ctx, db.Runtime)
	if err != nil || !slices.Equal(c.Missing, []string{"INSERT on job_runs", "USAGE on cron_claim_tokens"}) {
		t.Errorf("Check after two revokes: missing %q, %v; want INSERT on job_runs and USAGE on cron_claim_tokens", c.Missing, err)
	}
	if _, err := rt.Exec(ctx, "INSERT INTO job_runs (job, instance) VALUES ('j', 'i')"); err == nil || !strings.Contains(err.Error(), "permission denied for table job_runs") {
		t.Errorf("an insert without the grant: %v; want PostgreSQL's refusal naming job_runs", err)
	}
}

// Grant refuses a role that does not exist, and leaves Snip's own tables,
// when another role owns them, to that owner, saying so.
func TestGrantNamesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	super := benchtest.PostgresDB(t)
	owner, _ := dbtest.Roles(t, super)
	// Snip's application created links first, as its own role (here the superuser).
	if _, err := connect(t, super).Exec(ctx, "CREATE TABLE links (id bigint PRIMARY KEY, slug text NOT NULL UNIQUE)"); err != nil {
		t.Fatal(err)
	}
	dbtest.Migrate(t, owner)
	if _, err := migrations.Grant(ctx, owner, "nobody_here"); err == nil || !strings.Contains(err.Error(), `role "nobody_here" does not exist`) {
		t.Errorf("Grant to a missing role: %v", err)
	}
	notes, err := migrations.Grant(ctx, owner, dbtest.RuntimeRole)
	if err != nil || len(notes) != 1 || !strings.Contains(notes[0], `table links belongs to role postgres: as postgres, run GRANT SELECT ON links TO "snip_jobs"`) {
		t.Errorf("Grant with links owned by the application: notes %q, %v", notes, err)
	}
}

// programRole creates a login role for a program (named after the test's
// database, so unique in the cluster) and returns it and the database's URL
// as that role.
func programRole(t *testing.T, db dbtest.DB) (role, url string) {
	t.Helper()
	ctx := context.Background()
	super := connect(t, db.Super)
	if err := super.QueryRow(ctx, "SELECT current_database() || '_program'").Scan(&role); err != nil {
		t.Fatal(err)
	}
	if _, err := super.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	u, err := neturl.Parse(db.Super)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(role)
	return role, u.String()
}

// fence runs BEGIN, snip_jobs_fence(resource, token, holder) and COMMIT on c,
// as a program does, and returns the first error.
func fence(c *pgx.Conn, resource string, token int64, holder string) error {
	ctx := context.Background()
	tx, err := c.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT snip_jobs_fence($1, $2, $3)", resource, token, holder); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func wantSQLState(t *testing.T, what string, err error, code string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code {
		t.Errorf("%s: %v; want SQLSTATE %s", what, err, code)
	}
}

// A program's role granted the fence (`migrate --grant-fence-to`,
// GrantFence) fences its writes by the fence's rule and can do nothing else
// with fencing_tokens: it cannot write, empty or read the table by hand, nor
// make the function use a temporary table of its own instead. A role not
// granted the fence cannot call it, the service's runtime role included.
func TestAProgramsRoleCanFenceButCannotWriteTheTokensByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	role, url := programRole(t, db)
	if err := migrations.GrantFence(ctx, db.Owner, "nobody_here"); err == nil || !strings.Contains(err.Error(), `role "nobody_here" does not exist`) {
		t.Errorf("GrantFence to a missing role: %v", err)
	}
	for range 2 { // GRANT is idempotent
		if err := migrations.GrantFence(ctx, db.Owner, role); err != nil {
			t.Fatalf("GrantFence: %v", err)
		}
	}
	prog := connect(t, url)
	const res = "export:nightly"

	if err := fence(prog, res, 5, "server-1"); err != nil {
		t.Fatalf("as the program's role, token 5: %v", err)
	}
	wantSQLState(t, "as the program's role, token 4 after 5", fence(prog, res, 4, "server-1"), "SJ001")
	for _, stmt := range []string{
		"INSERT INTO fencing_tokens (resource, token, holder) VALUES ('export:other', 1, 'me')",
		"UPDATE fencing_tokens SET token = 1",
		"DELETE FROM fencing_tokens",
		"TRUNCATE fencing_tokens",
		"SELECT * FROM fencing_tokens",
	} {
		_, err := prog.Exec(ctx, stmt)
		wantSQLState(t, "as the program's role, "+stmt, err, "42501") // insufficient_privilege
	}
	// A temporary table comes first in a session's search_path, unless
	// placed last: the function's own path puts it last.
	if _, err := prog.Exec(ctx, `CREATE TEMP TABLE fencing_tokens (resource text PRIMARY KEY, token bigint, holder text, updated_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	wantSQLState(t, "token 4 with a temporary fencing_tokens", fence(prog, res, 4, "server-1"), "SJ001")

	wantSQLState(t, "as the runtime role, not granted the fence", fence(connect(t, db.Runtime), res, 6, "server-1"), "42501")
	var token int64
	var holder string
	if err := connect(t, db.Owner).QueryRow(ctx, "SELECT token, holder FROM fencing_tokens WHERE resource = $1", res).Scan(&token, &holder); err != nil || token != 5 || holder != "server-1" {
		t.Errorf("stored: token %d holder %q (%v), want 5 server-1", token, holder, err)
	}
}

// Every function of the schema that runs with its owner's rights (SECURITY
// DEFINER) is closed to PUBLIC and given to a program's role by GrantFence:
// a migration that adds one must decide who may call it. The others run
// with their caller's rights, and may stay open to PUBLIC as PostgreSQL
// makes them: through them a caller does only what it may do itself.
func TestEveryFunctionOfTheSchemaIsCallableByWhoNeedsItAndNoOneElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	role, _ := programRole(t, db)
	if err := migrations.GrantFence(ctx, db.Owner, role); err != nil {
		t.Fatal(err)
	}
	rows, err := connect(t, db.Owner).Query(ctx, `
		SELECT p.oid::regprocedure::text, has_function_privilege('public', p.oid, 'EXECUTE'), has_function_privilege($1, p.oid, 'EXECUTE')
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.prosecdef
		ORDER BY 1`, role)
	if err != nil {
		t.Fatal(err)
	}
	var definers []string
	var fn string
	var public, program bool
	if _, err := pgx.ForEachRow(rows, []any{&fn, &public, &program}, func() error {
		definers = append(definers, fn)
		if public {
			t.Errorf("%s runs with its owner's rights and PUBLIC may call it: REVOKE EXECUTE … FROM PUBLIC in its migration", fn)
		}
		if !program {
			t.Errorf("%s runs with its owner's rights and GrantFence does not grant it: add it to migrations.fenceGrants, or say why not here", fn)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"snip_jobs_fence(text,bigint,text,interval)"}; !slices.Equal(definers, want) {
		t.Errorf("SECURITY DEFINER functions %q, want %q", definers, want)
	}
}

// docs/operations.md shows the fence's grant as the binary gives it.
func TestTheFenceGrantInTheDocsIsTheBinarys(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- sql: fence-grants[^\n]*-->\n```sql\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/operations.md has no fence-grants SQL block")
	}
	if want := migrations.GrantFenceSQL("nightly_export"); string(m[1]) != want {
		t.Errorf("docs/operations.md's fence grant:\n%s\nthe binary's (migrations.GrantFenceSQL):\n%s", m[1], want)
	}
}
