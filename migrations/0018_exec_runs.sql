-- Runs of the exec job type (jobs/execjob): a program run per run of the
-- schedule. job_runs.pid is the program's process while it runs, for
-- `snip-jobs status` and the status page; job_runs.result gains `timed out`
-- (a run stopped past its job's timeout). A binary from before this
-- migration writes neither. Adding a nullable column rewrites no row; the new
-- CHECK reads job_runs once (each job's newest 1,000 runs).
--
-- snip_jobs_reclaimed (0016) takes the records' lock of each job it names
-- first, as the other record functions do: it updated job_terms, then
-- job_runs, while a successor's snip_jobs_term_start, started at the same
-- moment (a reclaim lets it win at once), updates job_runs, then job_terms,
-- and PostgreSQL ended one of the two as a deadlock.

-- +goose Up
ALTER TABLE job_runs ADD COLUMN pid integer;
ALTER TABLE job_runs DROP CONSTRAINT job_runs_result_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_result_check
    CHECK (result IN ('ok', 'error', 'panic', 'stale', 'cancelled', 'overrun', 'cut off', 'timed out'));

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION snip_jobs_reclaimed(p_lease text, OUT terms bigint, OUT runs bigint)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('snip-jobs records ' || j.job, 0))
        FROM (SELECT DISTINCT t.job FROM job_terms t WHERE t.lease = p_lease ORDER BY t.job) j;
    WITH named AS (
        SELECT t.job, t.token FROM job_terms t
        WHERE t.lease = p_lease AND (t.ended_at IS NULL OR t.ended_by IS DISTINCT FROM t.instance)
    ), closed AS (
        UPDATE job_runs r SET finished_at = now(), result = 'cut off',
            error = format('its term (token %s) ended while it ran: its process died and was reclaimed', r.token)
        FROM named WHERE r.job = named.job AND r.token = named.token AND r.finished_at IS NULL
        RETURNING r.id
    )
    SELECT count(*) INTO runs FROM closed;
    UPDATE job_terms t SET reason = 'reclaimed', ended_by = 'reclaim', ended_at = least(t.ended_at, now())
        WHERE t.lease = p_lease AND (t.ended_at IS NULL OR t.ended_by IS DISTINCT FROM t.instance);
    GET DIAGNOSTICS terms = ROW_COUNT;
END
$$;
-- +goose StatementEnd

-- +goose Down
UPDATE job_runs SET result = 'error' WHERE result = 'timed out';
ALTER TABLE job_runs DROP CONSTRAINT job_runs_result_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_result_check
    CHECK (result IN ('ok', 'error', 'panic', 'stale', 'cancelled', 'overrun', 'cut off'));
ALTER TABLE job_runs DROP COLUMN pid;
-- (snip_jobs_reclaimed stays as this migration left it: the same function,
-- taking its locks in the other functions' order.)
