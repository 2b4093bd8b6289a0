-- What started each run of job_runs, for `snip-jobs history`: 'schedule' (an
-- interval or continuous run, or a cron slot run on time), 'catch-up' (a cron
-- slot run late by the catch-up sweep: due before the on-time window) or
-- 'manual' (an operator's "run now"). Rows from before this migration, and
-- those a binary from before it writes during a rolling upgrade, take the
-- default: 'schedule'. Adding a column with a constant default rewrites no
-- row; the check reads job_runs once (each job's newest 1,000 runs).

-- +goose Up
ALTER TABLE job_runs ADD COLUMN trigger text NOT NULL DEFAULT 'schedule'
    CHECK (trigger IN ('schedule', 'catch-up', 'manual'));

-- +goose Down
ALTER TABLE job_runs DROP COLUMN trigger;
