-- Scheduler bookkeeping: durable cron slots and a log of job runs.

-- +goose Up
-- One row per (job, scheduled instant). A slot is claimed with the fencing token
-- of the term (leader mode) or of the claim itself (database mode) and marked
-- done once; the primary key makes "two runs of one slot" impossible to record.
CREATE TABLE cron_slots (
    job          text        NOT NULL,
    slot         timestamptz NOT NULL,
    state        text        NOT NULL CHECK (state IN ('running', 'done', 'failed', 'skipped')),
    token        bigint      NOT NULL,
    instance     text        NOT NULL,
    attempts     integer     NOT NULL DEFAULT 1,
    claimed_at   timestamptz NOT NULL DEFAULT now(),
    -- database mode: another instance may take the slot over after this instant
    claim_until  timestamptz,
    finished_at  timestamptz,
    error        text,
    PRIMARY KEY (job, slot)
);
CREATE INDEX cron_slots_open ON cron_slots (job, slot) WHERE state <> 'done';

-- Claim tokens for database mode: strictly increasing, like etcd revisions.
CREATE SEQUENCE cron_claim_tokens;

-- What ran where, for `snip-jobs status` and the status page. Not fenced: it is
-- a log of attempts (a refused stale run is recorded as such), not job output.
CREATE TABLE job_runs (
    id          bigserial   PRIMARY KEY,
    job         text        NOT NULL,
    instance    text        NOT NULL,
    token       bigint      NOT NULL DEFAULT 0,
    slot        timestamptz,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    result      text CHECK (result IN ('ok', 'error', 'panic', 'stale', 'cancelled', 'overrun')),
    error       text
);
CREATE INDEX job_runs_latest ON job_runs (job, id DESC);

-- +goose Down
DROP TABLE job_runs;
DROP SEQUENCE cron_claim_tokens;
DROP TABLE cron_slots;
