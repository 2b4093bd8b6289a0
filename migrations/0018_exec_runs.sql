-- Runs of the exec job type (jobs/execjob): a program run per run of the
-- schedule. job_runs.pid is the program's process while it runs, for
-- `snip-jobs status` and the status page; job_runs.result gains `timed out`
-- (a run stopped past its job's timeout). A binary from before this
-- migration writes neither. Adding a nullable column rewrites no row; the new
-- CHECK reads job_runs once (each job's newest 1,000 runs).

-- +goose Up
ALTER TABLE job_runs ADD COLUMN pid integer;
ALTER TABLE job_runs DROP CONSTRAINT job_runs_result_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_result_check
    CHECK (result IN ('ok', 'error', 'panic', 'stale', 'cancelled', 'overrun', 'cut off', 'timed out'));

-- +goose Down
UPDATE job_runs SET result = 'error' WHERE result = 'timed out';
ALTER TABLE job_runs DROP CONSTRAINT job_runs_result_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_result_check
    CHECK (result IN ('ok', 'error', 'panic', 'stale', 'cancelled', 'overrun', 'cut off'));
ALTER TABLE job_runs DROP COLUMN pid;
