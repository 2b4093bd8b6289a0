package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// manualLogSQL is the harness's record of what the manual runs of the
// weekly report and the renewer did, for InvManualEffect (checkmanual.go):
//
//   - chaos_manual: each change of a manual run request's state or claimer
//     (a claim, a take-over by a newer term, the completion), noted while
//     its transaction commits, with that transaction's id: manual_runs keeps
//     only the last claimer and not the transaction that completed it;
//   - chaos_pass_ends: each end of a renewer's pass as its term's row records
//     it (certrenew_terms set 'idle' by the term itself: the pass's last,
//     fenced transaction), with its transaction's id. The row is the term's,
//     rewritten by every pass, so only a log tells one pass from the next.
//
// The weekly report's effect, a stored week, is logged already
// (chaos_writes). A previous release's schema may lack the tables (see
// Upgrade): their triggers are created once a migration adds them.
const manualLogSQL = `
CREATE TABLE IF NOT EXISTS chaos_manual (
    seq          bigint      PRIMARY KEY,
    id           bigint      NOT NULL,
    job          text        NOT NULL,
    state        text        NOT NULL,
    token        bigint,
    instance     text,
    xact         xid8        NOT NULL,
    xact_start   timestamptz NOT NULL,
    committed_at timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION chaos_manual_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_manual (seq, id, job, state, token, instance, xact, xact_start, committed_at)
    VALUES (nextval('chaos_commit_seq'), NEW.id, NEW.job, NEW.state, NEW.token, NEW.instance, pg_current_xact_id(), now(), clock_timestamp());
    RETURN NULL;
END $$;
CREATE TABLE IF NOT EXISTS chaos_pass_ends (
    seq          bigint      PRIMARY KEY,
    job          text        NOT NULL,
    token        bigint      NOT NULL,
    instance     text        NOT NULL,
    xact         xid8        NOT NULL,
    xact_start   timestamptz NOT NULL,
    committed_at timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION chaos_pass_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_pass_ends (seq, job, token, instance, xact, xact_start, committed_at)
    VALUES (nextval('chaos_commit_seq'), NEW.job, NEW.token, NEW.instance, pg_current_xact_id(), now(), clock_timestamp());
    RETURN NULL;
END $$;
DO $$ BEGIN
IF to_regclass('manual_runs') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'chaos_manual_changed') THEN
    CREATE CONSTRAINT TRIGGER chaos_manual_changed AFTER UPDATE ON manual_runs DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state OR NEW.token IS DISTINCT FROM OLD.token)
        EXECUTE FUNCTION chaos_manual_changed();
END IF;
IF to_regclass('certrenew_terms') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'chaos_pass_ended') THEN
    CREATE CONSTRAINT TRIGGER chaos_pass_ended AFTER UPDATE ON certrenew_terms DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW WHEN (NEW.state = 'idle') EXECUTE FUNCTION chaos_pass_ended();
END IF;
END $$;
`

// manualChange is a change of a manual run request as it committed
// (chaos_manual): State running is a claim by Token's term, done or failed
// its completion.
type manualChange struct {
	Seq       int64
	ID        int64
	Job       string
	State     string
	Token     int64
	Instance  string
	Xact      string
	Began     time.Time
	Committed time.Time
}

// passEnd is a renewer's pass ended by its term (chaos_pass_ends).
type passEnd struct {
	Seq       int64
	Job       string
	Token     int64
	Instance  string
	Xact      string
	Began     time.Time
	Committed time.Time
}

// readManualLog reads the harness's log of manual run requests and of the
// renewer's passes into c.
func readManualLog(ctx context.Context, pool *pgxpool.Pool, c *controlFacts) error {
	rows, err := pool.Query(ctx, `SELECT seq, id, job, state, coalesce(token, 0), coalesce(instance, ''), xact::text, xact_start, committed_at
		FROM chaos_manual ORDER BY seq`)
	if err == nil {
		c.changes, err = pgx.CollectRows(rows, pgx.RowToStructByPos[manualChange])
	}
	if err != nil {
		return fmt.Errorf("read chaos_manual: %w", err)
	}
	rows, err = pool.Query(ctx, `SELECT seq, job, token, instance, xact::text, xact_start, committed_at FROM chaos_pass_ends ORDER BY seq`)
	if err == nil {
		c.passEnds, err = pgx.CollectRows(rows, pgx.RowToStructByPos[passEnd])
	}
	if err != nil {
		return fmt.Errorf("read chaos_pass_ends: %w", err)
	}
	return nil
}
