package chaos

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// schemaSQL is the harness's own tables: the probe, whose rows record, at
// commit, their order (a deferred constraint trigger runs while the
// transaction commits) and the database's clock; and chaos_writes, the same
// record for the rows the other jobs write with their term's token (see
// loggedWrites). Both number commits from one sequence, and keep when the
// writing transaction began (now(): an act's start, for the operators'
// controls). The operators' controls have their own log (controlsSQL).
const schemaSQL = `
CREATE SEQUENCE chaos_commit_seq;
-- Every click event committed, copied as its transaction inserts it: the
-- aggregator deletes the events it has processed (no retention), and the
-- checker counts from this copy.
CREATE TABLE chaos_clicks (
    id      bigint      NOT NULL,
    txid    xid8        NOT NULL,
    link_id bigint,
    hour    timestamptz NOT NULL,
    defect  text
);
CREATE FUNCTION chaos_copy_clicks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_clicks (id, txid, link_id, hour, defect) SELECT id, txid, link_id, hour, defect FROM inserted;
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_copy_clicks AFTER INSERT ON click_events
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION chaos_copy_clicks();
-- The script job's writes (an exec job's program, through snip_jobs_fence).
CREATE TABLE chaos_script (
    id       bigserial PRIMARY KEY,
    instance text      NOT NULL,
    token    bigint    NOT NULL,
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE chaos_probe (
    id           bigserial PRIMARY KEY,
    instance     text      NOT NULL,
    token        bigint    NOT NULL,
    -- what started the run (@trigger) and the manual run request it
    -- executes (@manual_run; NULL for runs of the schedule), and when its
    -- transaction began
    trigger      text,
    manual_run   bigint,
    xact_start   timestamptz NOT NULL DEFAULT now(),
    commit_seq   bigint,
    committed_at timestamptz
);
CREATE FUNCTION chaos_probe_committed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE chaos_probe SET commit_seq = nextval('chaos_commit_seq'), committed_at = clock_timestamp() WHERE id = NEW.id;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER chaos_probe_commit AFTER INSERT ON chaos_probe
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION chaos_probe_committed();

-- One row per logged write of a job, inserted while its transaction commits:
-- seq is the commit order. token is the row's token column as written; row_instance
-- the row's own instance column (NULL when it has none); client the writing
-- session's application_name ("snip-jobs run <instance>", with " fence-token=N"
-- inside a fenced transaction); xact the writing transaction, xact_start when
-- it began.
CREATE TABLE chaos_writes (
    seq          bigint      PRIMARY KEY,
    job          text        NOT NULL,
    tbl          text        NOT NULL,
    op           text        NOT NULL,
    token        bigint,
    row_instance text,
    client       text        NOT NULL,
    xact         xid8        NOT NULL,
    xact_start   timestamptz NOT NULL,
    committed_at timestamptz NOT NULL
);
-- Arguments: the job, the name of the row's token column, and (optional) of
-- its instance column.
CREATE FUNCTION chaos_write_committed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r jsonb := to_jsonb(NEW);
BEGIN
    INSERT INTO chaos_writes (seq, job, tbl, op, token, row_instance, client, xact, xact_start, committed_at)
    VALUES (nextval('chaos_commit_seq'), TG_ARGV[0], TG_TABLE_NAME, TG_OP, (r ->> TG_ARGV[1])::bigint,
            CASE WHEN TG_NARGS > 2 THEN r ->> TG_ARGV[2] END,
            current_setting('application_name'), pg_current_xact_id(), now(), clock_timestamp());
    RETURN NULL;
END $$;

-- Every run the instances record in job_runs, copied as it is inserted and
-- each time its end is recorded: the scheduler prunes job_runs to each job's
-- newest 1,000 runs, fewer than a long run's probe runs.
CREATE TABLE chaos_runs (
    id          bigint      PRIMARY KEY,
    job         text        NOT NULL,
    instance    text        NOT NULL,
    token       bigint      NOT NULL,
    trigger     text,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    result      text
);
CREATE FUNCTION chaos_copy_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_runs (id, job, instance, token, trigger, started_at, finished_at, result)
    VALUES (NEW.id, NEW.job, NEW.instance, NEW.token, to_jsonb(NEW) ->> 'trigger', NEW.started_at, NEW.finished_at, NEW.result)
    ON CONFLICT (id) DO UPDATE SET finished_at = EXCLUDED.finished_at, result = EXCLUDED.result;
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_copy_run AFTER INSERT OR UPDATE ON job_runs FOR EACH ROW EXECUTE FUNCTION chaos_copy_run();
INSERT INTO links (id, slug) SELECT i, 'l' || i FROM generate_series(1, 20) i;
`

// controlsSQL is the log of the operators' pauses and drains: resume and
// undrain delete their rows (job_pauses, instance_drains), so a deferred
// trigger notes each one's commit, and the commit of the delete that lifted
// it, with the database's clock. A previous release's schema has no such
// tables (see Upgrade): their triggers are created once a migration adds them.
const controlsSQL = `
CREATE TABLE IF NOT EXISTS chaos_controls (
    kind      text        NOT NULL, -- pause or drain
    subject   text        NOT NULL, -- the job paused, the instance drained
    since     timestamptz NOT NULL, -- the row's paused_at or drained_at: its transaction's start
    committed timestamptz NOT NULL, -- the insert's commit
    lifted    timestamptz           -- the commit of the delete that lifted it (NULL: in force at the end)
);
CREATE OR REPLACE FUNCTION chaos_control_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO chaos_controls (kind, subject, since, committed)
        VALUES (TG_ARGV[0], to_jsonb(NEW) ->> TG_ARGV[1], (to_jsonb(NEW) ->> TG_ARGV[2])::timestamptz, clock_timestamp());
    ELSE
        UPDATE chaos_controls SET lifted = clock_timestamp()
        WHERE kind = TG_ARGV[0] AND subject = to_jsonb(OLD) ->> TG_ARGV[1] AND lifted IS NULL;
    END IF;
    RETURN NULL;
END $$;
DO $$ BEGIN
IF to_regclass('job_pauses') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'chaos_pause_changed') THEN
    CREATE CONSTRAINT TRIGGER chaos_pause_changed AFTER INSERT OR DELETE ON job_pauses DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION chaos_control_changed('pause', 'job', 'paused_at');
END IF;
IF to_regclass('instance_drains') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'chaos_drain_changed') THEN
    CREATE CONSTRAINT TRIGGER chaos_drain_changed AFTER INSERT OR DELETE ON instance_drains DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION chaos_control_changed('drain', 'instance', 'drained_at');
END IF;
END $$;
`

// loggedWrite is a kind of row write that carries the writer's term token,
// recorded in chaos_writes at commit.
type loggedWrite struct {
	job, table string
	events     string // INSERT, UPDATE or INSERT OR UPDATE
	when       string // the trigger's WHEN condition, if any
	token      string // the row's column holding the token
	instance   string // the row's column naming the instance, if any
}

// loggedWrites are the jobs' writes whose token is always the writing term's
// own: for each job, their tokens in commit order must never go down, and
// each must be a term of that job granted to the writer. Left out on purpose:
// updates that keep another term's token in the row (a successor marking its
// predecessor's certrenew_terms row lapsed or its order abandoned; a
// certificate made not current; a prune's update of the aggregator's state,
// which sets neither token nor updated_at; the re-sealing of keys), rows
// without a token (the counts, the outbox), certrenew_order_urls, which is
// written outside the fence by design, and the cron slots an operator's resume
// records skipped (token 0, no instance: no term's). A new write path that stores an older
// token in one of these tables shows up here as a violation: add it to the
// exceptions above only if that token is not the writer's by design.
var loggedWrites = []loggedWrite{
	{JobAggregator, "click_aggregator_state", "UPDATE", "NEW.updated_at IS DISTINCT FROM OLD.updated_at", "token", ""},
	{JobAggregator, "click_rejects", "INSERT", "", "token", ""},
	{JobReport, "weekly_reports", "INSERT OR UPDATE", "", "token", "instance"},
	{JobReport, "cron_slots", "INSERT OR UPDATE", "NEW.job = '" + JobReport + "' AND NOT (NEW.state = 'skipped' AND NEW.token = 0 AND NEW.instance = '')", "token", "instance"},
	{JobCerts, "certrenew_certificates", "INSERT", "", "token", "instance"},
	{JobCerts, "certrenew_orders", "INSERT", "", "token", "instance"},
	{JobCerts, "certrenew_terms", "INSERT", "", "token", "instance"},
	{JobCerts, "certrenew_domains", "INSERT", "", "token", ""},
	{JobCerts, "certrenew_domains", "UPDATE", "NEW.updated_at IS DISTINCT FROM OLD.updated_at", "token", ""},
	{JobCerts, "certrenew_challenges", "INSERT OR UPDATE", "", "fence_token", ""},
	{JobCerts, "certrenew_invalid_domains", "INSERT OR UPDATE", "", "token", ""},
	{JobCerts, "certrenew_job", "INSERT OR UPDATE", "", "token", ""},
	{JobCerts, "certrenew_account", "INSERT", "", "token", ""},
	{JobScript, "chaos_script", "INSERT", "", "token", "instance"},
}

// triggersSQL creates the deferred constraint triggers of loggedWrites, on
// the tables that exist and lack theirs: a previous release's schema may not
// have a table yet (see Upgrade), whose trigger is created once a migration
// adds it.
func triggersSQL() string {
	var b strings.Builder
	for i, w := range loggedWrites {
		when := ""
		if w.when != "" {
			when = " WHEN (" + w.when + ")"
		}
		args := fmt.Sprintf("''%s'', ''%s''", w.job, w.token)
		if w.instance != "" {
			args += fmt.Sprintf(", ''%s''", w.instance)
		}
		fmt.Fprintf(&b, `DO $$ BEGIN
IF to_regclass('%[2]s') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'chaos_write_%[1]d') THEN
EXECUTE 'CREATE CONSTRAINT TRIGGER chaos_write_%[1]d AFTER %[3]s ON %[2]s DEFERRABLE INITIALLY DEFERRED FOR EACH ROW%[4]s EXECUTE FUNCTION chaos_write_committed(%[5]s)';
END IF; END $$;
`, i, w.table, w.events, strings.ReplaceAll(when, "'", "''"), args)
	}
	return b.String()
}

func setupSchema(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("chaos schema: %w", err)
	}
	return installTriggers(ctx, pool)
}

// installTriggers adds the write log's, the controls log's and the manual
// runs' log's missing triggers (after a migration).
func installTriggers(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, triggersSQL()); err != nil {
		return fmt.Errorf("chaos schema: the write log's triggers: %w", err)
	}
	if _, err := pool.Exec(ctx, controlsSQL); err != nil {
		return fmt.Errorf("chaos schema: the controls' log: %w", err)
	}
	if _, err := pool.Exec(ctx, manualLogSQL); err != nil {
		return fmt.Errorf("chaos schema: the manual runs' log: %w", err)
	}
	return nil
}
