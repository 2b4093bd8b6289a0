package migrations_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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
