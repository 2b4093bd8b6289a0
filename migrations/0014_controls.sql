-- The operators' controls (docs/operations.md, "Pausing, running and
-- draining"): a job paused (`snip-jobs pause JOB`), an instance drained
-- (`snip-jobs drain`), a job run now (`snip-jobs run JOB`). The commands
-- write them; every instance reads them on a connection of its own that
-- LISTENs on snip_jobs_controls (a trigger notifies every changed row, at its
-- commit) and re-reads them every renew interval besides (package
-- scheduler/controls). Durable: a pause or a drain outlives every instance's
-- restart until it is lifted.
--
-- A binary from before this migration reads none of it: during a rolling
-- upgrade an old instance ignores a pause, a drain and a manual run.

-- +goose Up
-- A job no instance runs until it is resumed: who paused it, when (the
-- database's clock), why.
CREATE TABLE job_pauses (
    job        text        PRIMARY KEY,
    paused_by  text        NOT NULL,
    paused_at  timestamptz NOT NULL DEFAULT now(),
    reason     text        NOT NULL DEFAULT ''
);

-- An instance that leads no singleton until it is undrained (its jobs that run
-- everywhere go on).
CREATE TABLE instance_drains (
    instance    text        PRIMARY KEY,
    drained_by  text        NOT NULL,
    drained_at  timestamptz NOT NULL DEFAULT now(),
    reason      text        NOT NULL DEFAULT ''
);

-- One extra execution of a job, asked for by an operator. At most one request
-- of a job is open (pending or running) at a time: a second `run` joins it.
-- A singleton's request is claimed by the instance that runs it: with its
-- term's token (mode leader; the claim and the outcome are fenced writes on
-- the job's resource) or a claim token from cron_claim_tokens (mode
-- database, taken over once claim_until has passed). A request of a job that
-- runs everywhere is run once by each instance (manual_run_reports) and
-- closes once every instance of expected (those up when it was made) has
-- reported.
CREATE TABLE manual_runs (
    id           bigserial   PRIMARY KEY,
    job          text        NOT NULL,
    mode         text        NOT NULL CHECK (mode IN ('leader', 'database', 'everywhere')),
    requested_by text        NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    expected     text[]      NOT NULL DEFAULT '{}',
    state        text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'running', 'done', 'failed')),
    instance     text,
    token        bigint,
    claim_until  timestamptz,
    attempts     integer     NOT NULL DEFAULT 0,
    run_id       bigint,
    started_at   timestamptz,
    finished_at  timestamptz,
    result       text,
    error        text
);
CREATE UNIQUE INDEX manual_runs_open ON manual_runs (job) WHERE state IN ('pending', 'running');
CREATE INDEX manual_runs_recent ON manual_runs (job, id DESC);

-- Each instance's run of a request of a job that runs everywhere: inserted
-- before it runs (the primary key makes it run once per instance), finished
-- after.
CREATE TABLE manual_run_reports (
    request     bigint      NOT NULL REFERENCES manual_runs (id) ON DELETE CASCADE,
    instance    text        NOT NULL,
    run_id      bigint,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    result      text,
    error       text,
    PRIMARY KEY (request, instance)
);

-- +goose StatementBegin
CREATE FUNCTION snip_jobs_controls_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('snip_jobs_controls', TG_TABLE_NAME);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER job_pauses_notify AFTER INSERT OR UPDATE OR DELETE ON job_pauses
    FOR EACH ROW EXECUTE FUNCTION snip_jobs_controls_notify();
CREATE TRIGGER instance_drains_notify AFTER INSERT OR UPDATE OR DELETE ON instance_drains
    FOR EACH ROW EXECUTE FUNCTION snip_jobs_controls_notify();
CREATE TRIGGER manual_runs_notify AFTER INSERT OR UPDATE OR DELETE ON manual_runs
    FOR EACH ROW EXECUTE FUNCTION snip_jobs_controls_notify();
CREATE TRIGGER manual_run_reports_notify AFTER INSERT OR UPDATE OR DELETE ON manual_run_reports
    FOR EACH ROW EXECUTE FUNCTION snip_jobs_controls_notify();

-- +goose Down
DROP TABLE manual_run_reports;
DROP TABLE manual_runs;
DROP TABLE instance_drains;
DROP TABLE job_pauses;
DROP FUNCTION snip_jobs_controls_notify();
