-- History of terms and of refused writes, for the status page's timeline,
-- `snip-jobs status` and the fault-injection checker. Bookkeeping, not job
-- output: written outside the fence, best-effort, with the database's clock so
-- that instants from different servers compare.

-- +goose Up
CREATE TABLE job_terms (
    job        text        NOT NULL,
    token      bigint      NOT NULL,
    instance   text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz,
    reason     text,
    PRIMARY KEY (job, token)
);
CREATE INDEX job_terms_recent ON job_terms (started_at DESC);

CREATE TABLE fence_rejections (
    id         bigserial   PRIMARY KEY,
    resource   text        NOT NULL,
    token      bigint      NOT NULL,
    current    bigint      NOT NULL,
    instance   text        NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fence_rejections_recent ON fence_rejections (at DESC);

-- +goose Down
DROP TABLE fence_rejections;
DROP TABLE job_terms;
