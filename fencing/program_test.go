package fencing_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/migrations"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// docsExample returns the code block after <!-- example: name … --> in
// docs/operations.md: the tests run the examples operators read.
func docsExample(t *testing.T, name string) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- example: " + regexp.QuoteMeta(name) + "[ (][^\n]*-->\n```[a-z]+\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/operations.md has no code block after <!-- example: %s -->", name)
	}
	return string(m[1])
}

// programBench is a database set up as docs/operations.md says, with a
// program's role granted only the fence (migrate --grant-fence-to) and
// INSERT on its own table, exports.
type programBench struct {
	t    *testing.T
	db   dbtest.DB
	env  []string // libpq's environment for the program's role
	path string   // PATH: psql's folder, then Debian's
}

func newProgramBench(t *testing.T) *programBench {
	t.Helper()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	owner, err := pgx.Connect(ctx, db.Owner)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	var role string
	if err := owner.QueryRow(ctx, "SELECT current_database() || '_export'").Scan(&role); err != nil {
		t.Fatal(err)
	}
	dbtest.Exec(t, db.Super, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN")
	if err := migrations.GrantFence(ctx, db.Owner, role); err != nil {
		t.Fatal(err)
	}
	r := pgx.Identifier{role}.Sanitize()
	dbtest.Exec(t, db.Owner, `CREATE TABLE exports (id bigserial PRIMARY KEY, token bigint NOT NULL, instance text NOT NULL);
		GRANT INSERT ON exports TO `+r+`; GRANT USAGE ON SEQUENCE exports_id_seq TO `+r)

	u, err := url.Parse(db.Super)
	if err != nil {
		t.Fatal(err)
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatalf("psql not found (%v): install Debian's postgresql-client, as .ci/run does", err)
	}
	return &programBench{t: t, db: db, path: filepath.Dir(psql) + ":/usr/bin:/bin", env: []string{
		"PGHOST=" + u.Hostname(), "PGPORT=" + u.Port(), "PGDATABASE=" + strings.TrimPrefix(u.Path, "/"),
		"PGUSER=" + role, "PGSSLMODE=disable",
	}}
}

// run runs the program in file with the term's environment, a minimal one
// as snip-jobs gives: its exit status and standard error.
func (b *programBench) run(file, resource, token, instance string) (code int, stderr string) {
	b.t.Helper()
	cmd := exec.Command(file)
	cmd.Env = append([]string{"PATH=" + b.path, "HOME=" + b.t.TempDir(),
		"SNIP_JOBS_RESOURCE=" + resource, "SNIP_JOBS_TOKEN=" + token, "SNIP_JOBS_INSTANCE=" + instance}, b.env...)
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, errBuf.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), errBuf.String()
	default:
		b.t.Fatalf("%s: %v", file, err)
		return 0, ""
	}
}

// exports returns the rows of the program's table, as "token instance".
func (b *programBench) exports() []string {
	b.t.Helper()
	conn, err := pgx.Connect(context.Background(), b.db.Owner)
	if err != nil {
		b.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), "SELECT token || ' ' || instance FROM exports ORDER BY id")
	if err != nil {
		b.t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.t.Fatal(err)
	}
	return got
}

// exampleFile writes the docs' example name to an executable file.
func (b *programBench) exampleFile(name string) string {
	b.t.Helper()
	file := filepath.Join(b.t.TempDir(), name)
	if err := os.WriteFile(file, []byte(docsExample(b.t, name)), 0o755); err != nil {
		b.t.Fatal(err)
	}
	return file
}

// checkExample runs the docs' example: with its term's token it writes
// (exit 0); once a Go writer of a newer term has written, it is refused by
// its SQLSTATE (exit 2, the refusal's message on stderr) and writes nothing;
// any other failure is not taken for a refusal (exit 1).
func (b *programBench) checkExample(file string) {
	t := b.t
	const res = "export:nightly"
	if code, stderr := b.run(file, res, "5", "server-1"); code != 0 {
		t.Fatalf("with the term's token 5: exit %d, want 0\n%s", code, stderr)
	}
	b.wantExports("5 server-1")

	goWriter := fencing.New(dbtest.Pool(t, b.db.Runtime), "server-2")
	if err := goWriter.Do(context.Background(), res, 9, func(context.Context, pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	code, stderr := b.run(file, res, "7", "server-3")
	if code != 2 || !strings.Contains(stderr, "refused by the fence: ") ||
		!strings.Contains(stderr, `fencing: write to "export:nightly" with token 7 refused: token 9 (holder "server-2") has already written to it`) {
		t.Errorf("with token 7 after Go's 9: exit %d, want 2 and the refusal on stderr:\n%s", code, stderr)
	}
	t.Logf("refused: %s", stderr)
	b.wantExports("5 server-1")

	if code, stderr := b.run(file, res, "0", "server-3"); code != 1 || strings.Contains(stderr, "refused by the fence") {
		t.Errorf("with token 0: exit %d, want 1 (not a refusal)\n%s", code, stderr)
	}
	b.wantExports("5 server-1")
}

func (b *programBench) wantExports(want ...string) {
	b.t.Helper()
	if got := b.exports(); strings.Join(got, ", ") != strings.Join(want, ", ") {
		b.t.Errorf("exports %q, want %q", got, want)
	}
}

func TestTheDocsPsqlExampleFencesAProgramsWrite(t *testing.T) {
	t.Parallel()
	b := newProgramBench(t)
	b.checkExample(b.exampleFile("fence-psql"))
}

func TestTheDocsPythonExampleFencesAProgramsWrite(t *testing.T) {
	t.Parallel()
	b := newProgramBench(t)
	// As the example's #! line finds it: python3 on the program's PATH.
	check := exec.Command("/usr/bin/env", "python3", "-c", "import psycopg2")
	check.Env = []string{"PATH=" + b.path}
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("Debian's python3 with psycopg2 (PATH %s): %v\n%s\ninstall Debian's python3-psycopg2, as .ci/run does", b.path, err, out)
	}
	b.checkExample(b.exampleFile("fence-python"))
}
