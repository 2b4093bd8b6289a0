package dbtest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

// commitChannel is the NOTIFY channel of WaitCommit's triggers.
const commitChannel = "testdb_commit"

// notifySQL makes PostgreSQL say when a statement's changes to a table commit:
// a statement-level trigger that NOTIFYs (delivered at commit, nothing on
// rollback) with the table's name.
const notifySQL = `CREATE FUNCTION testdb_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_notify('` + commitChannel + `', TG_TABLE_NAME); RETURN NULL; END $$`

// notifying remembers the tables (database URL + table) whose trigger is in.
var notifying sync.Map

// WaitCommit waits until cond holds: it checks cond once, then again after
// each commit that changed one of tables in the database at url (a trigger
// there NOTIFYs; WaitCommit adds it the first time, so url must be the
// superuser's or the tables' owner's). It listens before the first check, so
// no commit is missed: the database signals, the test does not poll. It fails
// the test naming what it waited for once benchtest.Patience has passed.
func WaitCommit(t testing.TB, url, what string, tables []string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("testdb: wait for %s: %v", what, err)
	}
	defer conn.Close(context.Background())
	if err := notifyOn(ctx, conn, url, tables); err != nil {
		t.Fatalf("testdb: wait for %s: %v", what, err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+commitChannel); err != nil {
		t.Fatalf("testdb: wait for %s: %v", what, err)
	}
	for !cond() {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			t.Fatalf("testdb: waited %v for %s: %v", benchtest.Patience, what, err)
		}
	}
}

// notifyOn adds the commit trigger to the tables that lack it.
func notifyOn(ctx context.Context, conn *pgx.Conn, url string, tables []string) error {
	for _, table := range tables {
		key := url + "\x00" + table
		if _, done := notifying.Load(key); done {
			continue
		}
		// One test at a time adds the function: the lock, not a retry,
		// answers two tests adding triggers in one database at once.
		trigger := "CREATE OR REPLACE TRIGGER testdb_notify AFTER INSERT OR UPDATE OR DELETE ON " +
			pgx.Identifier{table}.Sanitize() + " FOR EACH STATEMENT EXECUTE FUNCTION testdb_notify()"
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var exists bool
			_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('testdb_notify'))`)
			if err == nil {
				err = tx.QueryRow(ctx, `SELECT to_regprocedure('testdb_notify()') IS NOT NULL`).Scan(&exists)
			}
			if err == nil && !exists {
				_, err = tx.Exec(ctx, notifySQL)
			}
			if err == nil {
				_, err = tx.Exec(ctx, trigger)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("notify on commits to %s: %w", table, err)
		}
		notifying.Store(key, true)
	}
	return nil
}
