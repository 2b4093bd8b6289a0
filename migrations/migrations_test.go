package migrations

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

func TestUpAppliesEveryMigrationOnceAndThenNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := benchtest.PostgresDB(t)
	want := embeddedVersions(t)

	first, err := Up(ctx, url, benchtest.Logger(t))
	if err != nil {
		t.Fatalf("first Up: %v", err)
	}
	if !slices.Equal(first.Applied, want) {
		t.Errorf("first Up applied %v, want every embedded migration %v", first.Applied, want)
	}
	if first.Current != want[len(want)-1] {
		t.Errorf("first Up: current version %d, want %d", first.Current, want[len(want)-1])
	}
	if !tableExists(t, url, "fencing_tokens") {
		t.Errorf("fencing_tokens does not exist after Up")
	}

	second, err := Up(ctx, url, benchtest.Logger(t))
	if err != nil {
		t.Fatalf("second Up: %v", err)
	}
	if len(second.Applied) != 0 {
		t.Errorf("second Up applied %v, want nothing", second.Applied)
	}
	if second.Current != first.Current {
		t.Errorf("second Up: current version %d, want %d", second.Current, first.Current)
	}
	assertRecordedOnce(t, url, want)
}

// Three servers start together: three processes (this test binary re-run as
// children), released at the same moment, call Up on one fresh database.
func TestUpFromThreeProcessesAppliesEachMigrationOnce(t *testing.T) {
	t.Parallel()
	url := benchtest.PostgresDB(t)
	want := embeddedVersions(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	type child struct {
		cmd            *exec.Cmd
		gate           io.WriteCloser
		stdout, stderr bytes.Buffer
	}
	children := make([]*child, 3)
	for i := range children {
		c := &child{cmd: exec.Command(exe)}
		c.cmd.Env = append(os.Environ(), childURLEnv+"="+url)
		c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
		if c.gate, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := c.cmd.Start(); err != nil {
			t.Fatalf("start child %d: %v", i, err)
		}
		children[i] = c
	}
	for _, c := range children {
		c.gate.Close() // go
	}

	applied := map[int64]int{}
	var winners int
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\nstderr:\n%s", i, err, c.stderr.String())
		}
		var out childOutput
		if err := json.Unmarshal(c.stdout.Bytes(), &out); err != nil {
			t.Fatalf("child %d: output %q: %v\nstderr:\n%s", i, c.stdout.String(), err, c.stderr.String())
		}
		t.Logf("child %d (pid %d): applied %v, current %d, err %q", i, c.cmd.Process.Pid, out.Result.Applied, out.Result.Current, out.Err)
		if out.Err != "" {
			t.Errorf("child %d: Up failed: %s", i, out.Err)
		}
		if out.Result.Current != want[len(want)-1] {
			t.Errorf("child %d: current version %d, want %d", i, out.Result.Current, want[len(want)-1])
		}
		for _, v := range out.Result.Applied {
			applied[v]++
		}
		switch {
		case len(out.Result.Applied) == 0:
		case slices.Equal(out.Result.Applied, want):
			winners++
		default:
			t.Errorf("child %d applied %v: want all of %v or nothing (the lock holder applies every pending migration)",
				i, out.Result.Applied, want)
		}
	}
	if winners != 1 {
		t.Errorf("%d children applied the migrations, want exactly 1", winners)
	}
	for _, v := range want {
		if applied[v] != 1 {
			t.Errorf("children report version %d applied %d times, want once", v, applied[v])
		}
	}
	assertRecordedOnce(t, url, want)
}

func TestFailingMigrationIsNamedAndEarlierOnesStayApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := benchtest.PostgresDB(t)
	fsys := embeddedPlus(t, map[string]string{
		"9998_good.sql": "-- +goose Up\nCREATE TABLE good_before_broken (id int);\n" +
			"-- +goose Down\nDROP TABLE good_before_broken;\n",
		"9999_broken.sql": "-- +goose Up\nCREATE TABLE half_done (id int);\nCREATE TABLLE broken (id int);\n" +
			"-- +goose Down\nDROP TABLE half_done;\n",
	})

	res, err := up(ctx, url, benchtest.Logger(t), options{fsys: fsys})
	if err == nil {
		t.Fatal("Up with a broken migration succeeded")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "9999_broken.sql") {
		t.Errorf("error %q does not name 9999_broken.sql", err)
	}
	before := append(embeddedVersions(t), 9998)
	if !slices.Equal(res.Applied, before) {
		t.Errorf("Result.Applied = %v, want the migrations before the broken one %v", res.Applied, before)
	}
	if !tableExists(t, url, "good_before_broken") || !tableExists(t, url, "fencing_tokens") {
		t.Errorf("migrations before the broken one are not in effect")
	}
	if tableExists(t, url, "half_done") {
		t.Errorf("the broken migration's first statement was not rolled back")
	}
	assertRecordedOnce(t, url, before)

	// Fixed, the same run picks up where it stopped.
	fixed := embeddedPlus(t, map[string]string{
		"9998_good.sql":   "-- +goose Up\nCREATE TABLE good_before_broken (id int);\n",
		"9999_broken.sql": "-- +goose Up\nCREATE TABLE half_done (id int);\n",
	})
	res, err = up(ctx, url, benchtest.Logger(t), options{fsys: fixed})
	if err != nil {
		t.Fatalf("Up after the fix: %v", err)
	}
	if !slices.Equal(res.Applied, []int64{9999}) || res.Current != 9999 {
		t.Errorf("Up after the fix: %+v, want applied [9999], current 9999", res)
	}
}

// goose parses every pending file before it runs any, so a file it cannot
// parse stops the run before anything is applied.
func TestUnparsableMigrationIsNamedAndNothingIsApplied(t *testing.T) {
	t.Parallel()
	url := benchtest.PostgresDB(t)
	fsys := embeddedPlus(t, map[string]string{
		"9999_no_annotation.sql": "CREATE TABLE x (id int);\n",
	})
	res, err := up(context.Background(), url, benchtest.Logger(t), options{fsys: fsys})
	if err == nil {
		t.Fatal("Up with an unparsable migration succeeded")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "9999_no_annotation.sql") {
		t.Errorf("error %q does not name 9999_no_annotation.sql", err)
	}
	if len(res.Applied) != 0 || tableExists(t, url, "fencing_tokens") {
		t.Errorf("migrations were applied (%v) although a pending file cannot be parsed", res.Applied)
	}
}

// Rolling deploys: an older binary starting after a newer one migrated finds
// nothing to do; a file added below the newest applied version is an error.
func TestNewerSchemaIsLeftAloneAndOutOfOrderFilesAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := benchtest.PostgresDB(t)
	newer := embeddedPlus(t, map[string]string{"9999_future.sql": "-- +goose Up\nCREATE TABLE future (id int);\n"})
	if _, err := up(ctx, url, nil, options{fsys: newer}); err != nil {
		t.Fatalf("newer binary: %v", err)
	}

	res, err := Up(ctx, url, benchtest.Logger(t))
	if err != nil {
		t.Fatalf("older binary: %v", err)
	}
	if len(res.Applied) != 0 || res.Current != 9999 {
		t.Errorf("older binary: %+v, want nothing applied and current version 9999", res)
	}

	late := embeddedPlus(t, map[string]string{
		"9999_future.sql": "-- +goose Up\nCREATE TABLE future (id int);\n",
		"0500_late.sql":   "-- +goose Up\nCREATE TABLE late (id int);\n",
	})
	_, err = up(ctx, url, nil, options{fsys: late})
	t.Logf("error: %v", err)
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("Up with a file below the newest applied version: error %v, want one naming version 500", err)
	}
	if tableExists(t, url, "late") {
		t.Errorf("the out-of-order migration was applied")
	}
}

// goose skips a file whose name it cannot number; Up refuses it instead.
func TestMisnamedMigrationFileIsRefused(t *testing.T) {
	t.Parallel()
	url := benchtest.PostgresDB(t)
	for _, name := range []string{"0002-scheduler.sql", "02_scheduler.sql", "0002_Scheduler.sql", "scheduler.sql", "0000_zero.sql"} {
		t.Run(name, func(t *testing.T) {
			fsys := embeddedPlus(t, map[string]string{name: "-- +goose Up\nSELECT 1;\n"})
			_, err := up(context.Background(), url, nil, options{fsys: fsys})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("Up with %s: error %v, want one naming the file", name, err)
			}
		})
	}
	t.Run("duplicate version", func(t *testing.T) {
		fsys := embeddedPlus(t, map[string]string{
			"0900_a.sql": "-- +goose Up\nSELECT 1;\n",
			"0900_b.sql": "-- +goose Up\nSELECT 1;\n",
		})
		_, err := up(context.Background(), url, nil, options{fsys: fsys})
		if err == nil || !strings.Contains(err.Error(), "0900_a.sql") || !strings.Contains(err.Error(), "0900_b.sql") {
			t.Errorf("Up with two files of version 0900: error %v, want one naming both", err)
		}
	})
	if tableExists(t, url, "fencing_tokens") {
		t.Errorf("migrations were applied although the folder was refused")
	}
}

func TestUnreachableDatabaseGivesAnError(t *testing.T) {
	t.Parallel()
	t.Run("nothing listens", func(t *testing.T) {
		_, err := Up(context.Background(), "postgres://postgres@"+closedAddr(t)+"/db?sslmode=disable", nil)
		t.Logf("error: %v", err)
		if err == nil || !strings.Contains(err.Error(), "cannot reach PostgreSQL") {
			t.Errorf("Up: error %v, want one saying PostgreSQL cannot be reached", err)
		}
	})
	t.Run("server accepts but never answers", func(t *testing.T) {
		// No connect_timeout in the URL: the default bound applies (shortened
		// here so the test is quick; TestConnectTimeoutDefault checks the
		// production value).
		url := "postgres://postgres@" + silentServer(t) + "/db?sslmode=disable"
		_, err := up(context.Background(), url, nil, options{fsys: embedded, connectTimeout: 200 * time.Millisecond})
		t.Logf("error: %v", err)
		if err == nil || !strings.Contains(err.Error(), "cannot reach PostgreSQL") {
			t.Errorf("Up: error %v, want one saying PostgreSQL cannot be reached", err)
		}
		if !strings.Contains(err.Error(), "timeout") {
			t.Errorf("Up: error %v, want it to say the connection timed out", err)
		}
	})
	t.Run("check too", func(t *testing.T) {
		_, err := Check(context.Background(), "postgres://postgres@"+closedAddr(t)+"/db?sslmode=disable")
		if err == nil || !strings.Contains(err.Error(), "cannot reach PostgreSQL") {
			t.Errorf("Check: error %v, want one saying PostgreSQL cannot be reached", err)
		}
	})
	t.Run("status too", func(t *testing.T) {
		_, err := Status(context.Background(), "postgres://postgres@"+closedAddr(t)+"/db?sslmode=disable")
		if err == nil || !strings.Contains(err.Error(), "cannot reach PostgreSQL") {
			t.Errorf("Status: error %v, want one saying PostgreSQL cannot be reached", err)
		}
	})
}

func TestConnectTimeoutDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		want time.Duration
	}{
		{"postgres://u@127.0.0.1:5432/db", defaultConnectTimeout},
		{"postgres://u@127.0.0.1:5432/db?connect_timeout=0", defaultConnectTimeout}, // libpq: 0 means wait forever
		{"postgres://u@127.0.0.1:5432/db?connect_timeout=3", 3 * time.Second},
	} {
		cfg, err := connConfig(tc.url, defaultConnectTimeout)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if cfg.ConnectTimeout != tc.want {
			t.Errorf("%s: connect timeout %v, want %v", tc.url, cfg.ConnectTimeout, tc.want)
		}
	}
}

func TestPasswordIsNeverShown(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-Pa55"
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, url := range []string{
		"postgres://snip:" + secret + "@" + closedAddr(t) + "/db?sslmode=disable",
		"postgres://snip:" + secret + "@127.0.0.1:notaport/db",
		"postgres://snip:" + secret + "@127.0.0.1:5432/db?connect_timeout=never",
		"host=127.0.0.1 port=1 password=" + secret + " user=snip connect_timeout=x",
	} {
		_, err := Up(context.Background(), url, log)
		if err == nil {
			t.Fatalf("Up(%q) succeeded", url)
		}
		t.Logf("error: %v", err)
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error shows the password: %v", err)
		}
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("log shows the password:\n%s", logs.String())
	}
}

func TestStatusReportsPendingThenApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := benchtest.PostgresDB(t)
	want := embeddedVersions(t)

	st, err := Status(ctx, url)
	if err != nil {
		t.Fatalf("Status before Up: %v", err)
	}
	if got := statusVersions(st); !slices.Equal(got, want) {
		t.Fatalf("Status lists %v, want %v", got, want)
	}
	for _, s := range st {
		if s.Applied || !s.AppliedAt.IsZero() {
			t.Errorf("before Up: %+v, want pending", s)
		}
		if want := fmt.Sprintf("%04d_", s.Version); !strings.HasPrefix(s.Name, want) || !strings.HasSuffix(s.Name, ".sql") {
			t.Errorf("status name %q does not match version %d", s.Name, s.Version)
		}
	}

	// A session time zone far from UTC must not shift the recorded times.
	before := dbNow(t, url)
	if _, err := Up(ctx, url+"&timezone=Pacific/Kiritimati", nil); err != nil {
		t.Fatalf("Up: %v", err)
	}
	after := dbNow(t, url)

	st, err = Status(ctx, url)
	if err != nil {
		t.Fatalf("Status after Up: %v", err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("after Up: %+v, want applied", s)
		}
		// The database's clock on both sides; microsecond precision.
		if s.AppliedAt.Before(before.Truncate(time.Microsecond)) || s.AppliedAt.After(after) {
			t.Errorf("%s applied at %v, not between the database's now() before (%v) and after (%v) Up",
				s.Name, s.AppliedAt, before, after)
		}
	}
}

// Check only reads, and says what a binary needs: the migrations the
// database lacks, and the versions it has that the binary does not know.
func TestCheckReportsPendingAndUnknownMigrationsWithoutWriting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := benchtest.PostgresDB(t)
	names := embeddedNames(t)
	versions := embeddedVersions(t)
	last, beforeLast := names[len(names)-1], versions[len(versions)-2]

	c, err := Check(ctx, url)
	if err != nil {
		t.Fatalf("Check of a database never migrated: %v", err)
	}
	if c.Current != 0 || !slices.Equal(c.Pending, names) || len(c.Unknown) != 0 {
		t.Errorf("Check of a database never migrated: %+v, want every migration pending", c)
	}
	if tableExists(t, url, "goose_db_version") {
		t.Errorf("Check created goose's table")
	}

	// The previous binary migrated: everything but the newest file.
	if _, err := up(ctx, url, nil, options{fsys: embeddedWithout(t, last)}); err != nil {
		t.Fatalf("Up without %s: %v", last, err)
	}
	c, err = Check(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if c.Current != beforeLast || !slices.Equal(c.Pending, []string{last}) || len(c.Unknown) != 0 {
		t.Errorf("Check of a database without %s: %+v, want it pending at version %d", last, c, beforeLast)
	}

	// A newer binary migrated: one version this binary does not know.
	newer := embeddedPlus(t, map[string]string{"9999_future.sql": "-- +goose Up\nCREATE TABLE future (id int);\n"})
	if _, err := up(ctx, url, nil, options{fsys: newer}); err != nil {
		t.Fatalf("Up of the newer binary: %v", err)
	}
	c, err = Check(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if c.Current != 9999 || len(c.Pending) != 0 || !slices.Equal(c.Unknown, []int64{9999}) {
		t.Errorf("Check of a database a newer binary migrated: %+v, want nothing pending and 9999 unknown", c)
	}
}

// embeddedNames returns the embedded migration files' names, in version order.
func embeddedNames(t testing.TB) []string {
	t.Helper()
	names, err := fs.Glob(embedded, "*.sql")
	if err != nil || len(names) < 2 {
		t.Fatalf("embedded migrations: %v %v", names, err)
	}
	slices.Sort(names) // NNNN_: the order of the names is the order of the versions
	return names
}

// embeddedWithout returns the embedded migrations but the file named skip.
func embeddedWithout(t testing.TB, skip string) fs.FS {
	t.Helper()
	m := embeddedPlus(t, nil).(fstest.MapFS)
	if _, ok := m[skip]; !ok {
		t.Fatalf("no embedded migration %s", skip)
	}
	delete(m, skip)
	return m
}

// embeddedVersions returns the versions of the embedded migration files, in
// ascending order.
func embeddedVersions(t testing.TB) []int64 {
	t.Helper()
	names, err := fs.Glob(embedded, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("embedded migrations: %v %v", names, err)
	}
	var vs []int64
	for _, n := range names {
		v, err := strconv.ParseInt(n[:4], 10, 64)
		if err != nil {
			t.Fatalf("embedded migration %s: %v", n, err)
		}
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs
}

// embeddedPlus returns the embedded migrations with extra files added.
func embeddedPlus(t testing.TB, extra map[string]string) fs.FS {
	t.Helper()
	m := fstest.MapFS{}
	names, _ := fs.Glob(embedded, "*.sql")
	for _, n := range names {
		data, err := fs.ReadFile(embedded, n)
		if err != nil {
			t.Fatal(err)
		}
		m[n] = &fstest.MapFile{Data: data}
	}
	for n, text := range extra {
		m[n] = &fstest.MapFile{Data: []byte(text)}
	}
	return m
}

func statusVersions(st []MigrationStatus) []int64 {
	var vs []int64
	for _, s := range st {
		vs = append(vs, s.Version)
	}
	return vs
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func tableExists(t testing.TB, url, table string) bool {
	t.Helper()
	var ok bool
	if err := connect(t, url).QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok); err != nil {
		t.Fatalf("table %s exists: %v", table, err)
	}
	return ok
}

func dbNow(t testing.TB, url string) time.Time {
	t.Helper()
	var now time.Time
	if err := connect(t, url).QueryRow(context.Background(), "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// assertRecordedOnce checks that goose's table records version 0 (its own)
// and each of want exactly once, and nothing else.
func assertRecordedOnce(t testing.TB, url string, want []int64) {
	t.Helper()
	rows, err := connect(t, url).Query(context.Background(),
		"SELECT version_id, count(*) FROM goose_db_version GROUP BY version_id ORDER BY version_id")
	if err != nil {
		t.Fatal(err)
	}
	counts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]int64, error) {
		var vc [2]int64
		return vc, r.Scan(&vc[0], &vc[1])
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, vc := range counts {
		if vc[1] != 1 {
			t.Errorf("goose_db_version records version %d %d times, want once", vc[0], vc[1])
		}
		got = append(got, vc[0])
	}
	if w := append([]int64{0}, want...); !slices.Equal(got, w) {
		t.Errorf("goose_db_version records versions %v, want %v", got, w)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// silentServer returns the address of a server that accepts connections and
// never says a word: a hung or paused PostgreSQL.
func silentServer(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// The service's URL may carry the pool's settings (pool_max_conns, as
// docs/operations.md says, and the other pool_* keys): Up, Status, Check and
// Grant connect with it as it is, without sending them to PostgreSQL, which
// would refuse the connection (FATAL: unrecognized configuration parameter).
func TestTheURLsPoolSettingsAreNotSentToPostgreSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := benchtest.PostgresDB(t) + "&pool_max_conns=4&pool_min_conns=1&pool_max_conn_lifetime=1h"
	// run's schema comparison, before anything is applied.
	if c, err := Check(ctx, url); err != nil || len(c.Pending) == 0 {
		t.Fatalf("Check of a database never migrated: %+v, %v; want every migration pending", c, err)
	}
	if _, err := Up(ctx, url, nil); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if _, err := Status(ctx, url); err != nil {
		t.Errorf("Status: %v", err)
	}
	c, err := Check(ctx, url)
	if err != nil || len(c.Pending) != 0 {
		t.Errorf("Check: %+v, %v; want nothing pending", c, err)
	}
	const role = "nobody_at_all"
	if _, err := Grant(ctx, url, role); err == nil || !strings.Contains(err.Error(), `role "`+role+`" does not exist`) {
		t.Errorf("Grant to a role that does not exist: %v; want the refusal naming the role (the connection worked)", err)
	}
	cfg, err := connConfig(url, defaultConnectTimeout)
	if err != nil {
		t.Fatal(err)
	}
	for k := range cfg.RuntimeParams {
		if strings.HasPrefix(k, "pool_") {
			t.Errorf("run-time parameter %s would be sent to PostgreSQL", k)
		}
	}
}
