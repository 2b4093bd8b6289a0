-- What operators read is as true as the fence (docs/operations.md, "What the
-- history says of a term and a run"). The scheduler writes its records of
-- terms and runs through the functions below, which apply a fenced write's
-- rule to them: a term or a run that begins once a newer term of its job is
-- recorded (or, for a run, once a newer token has written to its resource) is
-- refused, and a run whose term had been succeeded before it returned is
-- recorded `cut off`, never `ok`. A successor closes what its predecessor left
-- open (a killed, frozen or cut-off instance records nothing): the term with
-- the reason it knows (expired) and when it learned it, the term's open runs
-- as `cut off`. A run's start also refuses a paused job, or a singleton's run
-- on a drained instance, whatever the instance's own read of the controls.
--
-- The functions of one job take turns (a transaction-level advisory lock per
-- job, and each statement after it reads what the previous holder committed):
-- a successor's start and an old term's last run cannot slip past each other.
--
-- job_terms.lease: the lease the term hung on (etcd's lease ID in hex; the
--   Kubernetes holder identity), so that `snip-jobs reclaim` can name the
--   terms of the process it proved dead.
-- job_terms.ended_by: who recorded the end: the term's own instance, the
--   instance whose term replaced it, or 'reclaim'. A hand-over recorded by the
--   term's own instance is the most exact account and replaces another's; a
--   late notice by a resumed instance only fills what nobody recorded.
-- job_terms.noticed_at: when the term's own instance recorded its end, if it
--   did: later than ended_at for an instance that was paused or cut off and
--   noticed late (the status page draws that stretch as a tail).
--
-- A binary from before this migration writes none of the new columns and
-- closes nothing: during a rolling upgrade its records are written as before.
-- Adding nullable columns rewrites no row; the new CHECK reads job_runs once
-- (each job's newest 1,000 runs).

-- +goose Up
ALTER TABLE job_terms
    ADD COLUMN lease      text,
    ADD COLUMN ended_by   text,
    ADD COLUMN noticed_at timestamptz;
CREATE INDEX job_terms_open ON job_terms (job, token) WHERE ended_at IS NULL;
CREATE INDEX job_terms_lease ON job_terms (lease) WHERE lease IS NOT NULL;

ALTER TABLE job_runs DROP CONSTRAINT job_runs_result_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_result_check
    CHECK (result IN ('ok', 'error', 'panic', 'stale', 'cancelled', 'overrun', 'cut off'));
-- A run's start and end look for runs of newer terms of the same job.
CREATE INDEX job_runs_job_token ON job_runs (job, token);

-- +goose StatementBegin
-- Records term p_token of p_job unless a newer one is recorded (then returns
-- its token as newer and records nothing), and closes the older terms left
-- open and their open runs.
CREATE FUNCTION snip_jobs_term_start(p_job text, p_token bigint, p_instance text, p_lease text,
    OUT newer bigint, OUT closed_terms bigint, OUT cut_runs bigint)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('snip-jobs records ' || p_job, 0));
    closed_terms := 0;
    cut_runs := 0;
    SELECT coalesce(max(t.token), 0) INTO newer FROM job_terms t WHERE t.job = p_job AND t.token > p_token;
    IF newer > 0 THEN
        RETURN;
    END IF;
    INSERT INTO job_terms (job, token, instance, lease) VALUES (p_job, p_token, p_instance, p_lease)
        ON CONFLICT (job, token) DO NOTHING;
    UPDATE job_runs r SET finished_at = now(), result = 'cut off',
        error = format('its term (token %s) ended while it ran: %s; recorded by %s, whose term (token %s) replaced it', r.token,
            coalesce((SELECT t.reason FROM job_terms t WHERE t.job = r.job AND t.token = r.token AND t.ended_at IS NOT NULL), 'expired'),
            p_instance, p_token)
        WHERE r.job = p_job AND r.token > 0 AND r.token < p_token AND r.finished_at IS NULL;
    GET DIAGNOSTICS cut_runs = ROW_COUNT;
    UPDATE job_terms t SET ended_at = now(), reason = 'expired', ended_by = p_instance
        WHERE t.job = p_job AND t.token < p_token AND t.ended_at IS NULL;
    GET DIAGNOSTICS closed_terms = ROW_COUNT;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records a run unless its token is stale (a newer token has written to
-- p_resource, or, for a term's run (p_term), a newer term or a run of one is
-- recorded, or its own term's end is) or an operator holds it back (its job
-- paused; a singleton's run, p_token > 0, on a drained instance). id is NULL
-- when refused; stale, and the pause or drain, say why. started_at is the
-- run's recorded start, from which the run's end is counted.
CREATE FUNCTION snip_jobs_run_start(p_job text, p_instance text, p_token bigint, p_slot timestamptz, p_trigger text,
    p_term boolean, p_resource text,
    OUT id bigint, OUT started_at timestamptz, OUT stale boolean, OUT paused_by text, OUT paused_at timestamptz,
    OUT paused_why text, OUT drained_by text, OUT drained_at timestamptz, OUT drained_why text)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_term THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('snip-jobs records ' || p_job, 0));
    END IF;
    stale := p_token > 0 AND (
        EXISTS (SELECT 1 FROM fencing_tokens f WHERE f.resource = p_resource AND f.token > p_token)
        OR p_term AND EXISTS (SELECT 1 FROM job_terms t WHERE t.job = p_job
            AND (t.token > p_token OR t.token = p_token AND t.ended_at IS NOT NULL))
        OR p_term AND EXISTS (SELECT 1 FROM job_runs n WHERE n.job = p_job AND n.token > p_token));
    SELECT p.paused_by, p.paused_at, p.reason INTO paused_by, paused_at, paused_why
        FROM job_pauses p WHERE p.job = p_job;
    IF p_token > 0 THEN
        SELECT d.drained_by, d.drained_at, d.reason INTO drained_by, drained_at, drained_why
            FROM instance_drains d WHERE d.instance = p_instance;
    END IF;
    IF NOT stale AND paused_by IS NULL AND drained_by IS NULL THEN
        INSERT INTO job_runs (job, instance, token, slot, trigger) VALUES (p_job, p_instance, p_token, p_slot, p_trigger)
            RETURNING job_runs.id, job_runs.started_at INTO id, started_at;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records how run p_id ended (p_result, p_error) at p_returned: when it
-- returned, on this database's clock, no later than the truth (its instance
-- counts it from the run's recorded start plus the time from the answer to
-- the start until the return). A term's run (p_term: of p_job, token
-- p_token) that a newer term had begun before it returned is recorded cut
-- off. The earliest end recorded stands: a successor may have closed the run
-- first.
CREATE FUNCTION snip_jobs_run_end(p_id bigint, p_result text, p_error text, p_returned timestamptz,
    p_job text, p_token bigint, p_term boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    returned timestamptz := least(p_returned, now());
    newer boolean := false;
BEGIN
    IF p_term AND p_result IN ('ok', 'cancelled', 'error') THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('snip-jobs records ' || p_job, 0));
        newer := EXISTS (SELECT 1 FROM job_terms t WHERE t.job = p_job AND t.token > p_token AND t.started_at <= returned)
            OR EXISTS (SELECT 1 FROM job_runs n WHERE n.job = p_job AND n.token > p_token AND n.started_at <= returned);
    END IF;
    UPDATE job_runs r SET finished_at = least(r.finished_at, returned),
        result = CASE WHEN newer THEN 'cut off' ELSE p_result END,
        error = CASE WHEN newer THEN concat_ws('; ', 'a newer term of the job began while it ran', p_error) ELSE p_error END
        WHERE r.id = p_id;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Names the terms of lease p_lease, whose process was proven dead and
-- reclaimed (snip-jobs reclaim): their reason becomes reclaimed, whoever
-- closed them first, unless their own instance recorded a hand-over; their
-- open runs close cut off.
CREATE FUNCTION snip_jobs_reclaimed(p_lease text, OUT terms bigint, OUT runs bigint)
LANGUAGE plpgsql AS $$
BEGIN
    WITH named AS (
        UPDATE job_terms t SET reason = 'reclaimed', ended_by = 'reclaim', ended_at = least(t.ended_at, now())
        WHERE t.lease = p_lease AND (t.ended_at IS NULL OR t.ended_by IS DISTINCT FROM t.instance)
        RETURNING t.job, t.token
    ), closed AS (
        UPDATE job_runs r SET finished_at = now(), result = 'cut off',
            error = format('its term (token %s) ended while it ran: its process died and was reclaimed', r.token)
        FROM named WHERE r.job = named.job AND r.token = named.token AND r.finished_at IS NULL
        RETURNING r.id
    )
    SELECT (SELECT count(*) FROM named), (SELECT count(*) FROM closed) INTO terms, runs;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION snip_jobs_reclaimed(text);
DROP FUNCTION snip_jobs_run_end(bigint, text, text, timestamptz, text, bigint, boolean);
DROP FUNCTION snip_jobs_run_start(text, text, bigint, timestamptz, text, boolean, text);
DROP FUNCTION snip_jobs_term_start(text, bigint, text, text);
DROP INDEX job_runs_job_token;
UPDATE job_runs SET result = 'cancelled' WHERE result = 'cut off';
ALTER TABLE job_runs DROP CONSTRAINT job_runs_result_check;
ALTER TABLE job_runs ADD CONSTRAINT job_runs_result_check
    CHECK (result IN ('ok', 'error', 'panic', 'stale', 'cancelled', 'overrun'));
DROP INDEX job_terms_lease;
DROP INDEX job_terms_open;
ALTER TABLE job_terms DROP COLUMN noticed_at, DROP COLUMN ended_by, DROP COLUMN lease;
