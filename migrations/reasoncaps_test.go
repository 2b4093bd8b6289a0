package migrations

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

// 0015 caps what operators write into the controls without breaking on
// what is there: a reason of 10 MB and a name of 1,000 characters written
// before it are cut to the caps (500 and 200 characters, the last one '…'),
// shorter ones are left alone, and from then on the database refuses
// longer text (check_violation, naming the constraint). Its Down lifts the
// caps; Up applies them again.
func TestTheControlsTextCapsCutWhatIsThereAndRefuseMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, c := migratedTo(t, 14)
	exec := func(sql string, args ...any) error {
		_, err := c.Exec(ctx, sql, args...)
		return err
	}
	huge, long := strings.Repeat("é", 5<<20), strings.Repeat("x", 1000)
	for _, sql := range []string{
		`INSERT INTO job_pauses (job, paused_by, reason) VALUES ('report', $2, $1), ('aggregator', 'alice@web1', 'mail server moves')`,
		`INSERT INTO instance_drains (instance, drained_by, reason) VALUES ('server-1', $2, $1)`,
		`INSERT INTO manual_runs (job, mode, requested_by) VALUES ('report', 'leader', $2 || left($1, 0))`,
	} {
		if err := exec(sql, huge, long); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.UpTo(ctx, 15); err != nil {
		t.Fatalf("0015 up over over-long rows: %v", err)
	}
	var got string
	err := c.QueryRow(ctx, `SELECT concat_ws('|',
			(SELECT string_agg(char_length(reason) || ' ' || right(reason, 1) || ' ' || char_length(paused_by), '|' ORDER BY job) FROM job_pauses),
			(SELECT string_agg(char_length(reason) || ' ' || right(reason, 1) || ' ' || char_length(drained_by), '|') FROM instance_drains),
			(SELECT string_agg(char_length(requested_by) || ' ' || right(requested_by, 1), '|') FROM manual_runs))`).Scan(&got)
	if err != nil {
		t.Fatal(err)
	}
	if want := "17 s 10|500 … 200|500 … 200|200 …"; got != want {
		t.Errorf("after 0015: %q, want %q (lengths, last character, and the name's length)", got, want)
	}
	for constraint, sql := range map[string]string{
		"job_pauses_reason_length":          `INSERT INTO job_pauses (job, paused_by, reason) VALUES ('weekly', 'bob', repeat('y', 501))`,
		"instance_drains_drained_by_length": `INSERT INTO instance_drains (instance, drained_by) VALUES ('server-2', repeat('y', 201))`,
		"manual_runs_requested_by_length":   `INSERT INTO manual_runs (job, mode, requested_by) VALUES ('weekly', 'leader', repeat('y', 201))`,
	} {
		if err := exec(sql); err == nil || !strings.Contains(err.Error(), constraint) || !strings.Contains(err.Error(), "SQLSTATE 23514") {
			t.Errorf("over the cap: %v; want %s's check_violation", err, constraint)
		}
	}
	if _, err := p.Down(ctx); err != nil {
		t.Fatalf("0015 down: %v", err)
	}
	if err := exec(`INSERT INTO job_pauses (job, paused_by, reason) VALUES ('weekly', 'bob', repeat('y', 501))`); err != nil {
		t.Errorf("after 0015's down: %v; want no cap", err)
	}
	if err := exec(`DELETE FROM job_pauses WHERE job = 'weekly'`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
}

// migratedTo is a new database with the migrations up to version applied:
// the provider that applies the others, and a connection to it.
func migratedTo(t *testing.T, version int64) (*goose.Provider, *pgx.Conn) {
	t.Helper()
	url := benchtest.PostgresDB(t)
	p, closeDB, err := open(context.Background(), url, options{fsys: embedded})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeDB)
	if _, err := p.UpTo(context.Background(), version); err != nil {
		t.Fatal(err)
	}
	return p, connect(t, url)
}
