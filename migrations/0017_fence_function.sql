-- The fence for programs in any language (docs/operations.md, "Fencing from a
-- program"): snip_jobs_fence(resource, token, holder, idle_timeout), called
-- inside the program's own transaction before its writes, applies the rule of
-- package fencing's Fence.Do to the same table, fencing_tokens, so that a Go
-- job and a program fencing one resource see each other's tokens. It upserts
-- the resource's row, advancing the token only if the stored one is not
-- higher, which locks the row until the transaction ends; it names the
-- transaction's token in application_name (" fence-token=N") as Go does, so
-- that a newer Go writer's stale-holder break (fencing.WithStaleHolderBreak)
-- can end a stale program's transaction too.
--
-- Errors, by SQLSTATE:
--   SJ001  the fence refused the write: a newer token has written to the
--          resource. The message names the resource, the refused token, the
--          stored token and its holder, in Go's words (*fencing.StaleTokenError).
--          Class SJ is none of PostgreSQL's nor the standard's; no driver or
--          pool retries it, as they retry serialization_failure (40001): a
--          stale term must stop, not try again.
--   22023  invalid_parameter_value: an empty or NULL resource or holder, a
--          token NULL or <= 0, an idle_timeout <= 0, a resource over 1000
--          characters or a holder over 200.
--   25P01  no_active_sql_transaction: called as the first statement of a
--          transaction that began with the same message, as a statement in
--          autocommit does (psql without BEGIN, psql -c, psycopg2 with
--          autocommit on). A function cannot see whether a transaction block
--          is open; transaction_timestamp() = statement_timestamp() is the
--          test. It misses an autocommit call made with the extended query
--          protocol (a driver's parameterised statement: pgx, psycopg 3,
--          JDBC), whose Bind and Execute messages come after the transaction
--          began, and it also refuses a whole transaction sent as one string
--          (psql -c 'BEGIN; SELECT snip_jobs_fence(...); ...; COMMIT'), which
--          would have been safe: open the transaction with BEGIN as a
--          statement of its own.
--
-- SECURITY DEFINER: a program's role is granted EXECUTE on this function
-- only (snip-jobs migrate --grant-fence-to ROLE), never a write on
-- fencing_tokens, so it can advance a token but cannot lower one, delete a
-- row or write around the rule. EXECUTE is revoked from PUBLIC. The function
-- runs with a fixed search_path (pg_catalog, then the schema of
-- fencing_tokens, then pg_temp last, so that a caller's temporary table
-- cannot stand in for fencing_tokens).
--
-- idle_timeout (optional, NULL leaves PostgreSQL's setting alone) sets
-- idle_in_transaction_session_timeout for this transaction, as Go's
-- fencing.WithIdleTimeout does with the lease's TTL: a program that stops
-- talking while it holds the row is ended by PostgreSQL after it, releasing
-- the row for the next term's writer.
--
-- No table changes: a binary from before this migration fences as before.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION snip_jobs_fence(resource text, token bigint, holder text DEFAULT session_user::text,
    idle_timeout interval DEFAULT NULL) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
#variable_conflict use_column
DECLARE
    stored bigint;
    stored_holder text;
BEGIN
    IF snip_jobs_fence.resource IS NULL OR snip_jobs_fence.resource = '' THEN
        RAISE EXCEPTION 'snip_jobs_fence: empty resource name' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF char_length(snip_jobs_fence.resource) > 1000 THEN
        RAISE EXCEPTION 'snip_jobs_fence: resource name of % characters: at most 1000', char_length(snip_jobs_fence.resource)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF snip_jobs_fence.token IS NULL OR snip_jobs_fence.token <= 0 THEN
        RAISE EXCEPTION 'snip_jobs_fence: token % for "%": tokens are positive', coalesce(snip_jobs_fence.token::text, 'NULL'),
            snip_jobs_fence.resource USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF snip_jobs_fence.holder IS NULL OR snip_jobs_fence.holder = '' OR char_length(snip_jobs_fence.holder) > 200 THEN
        RAISE EXCEPTION 'snip_jobs_fence: holder must be 1 to 200 characters (the instance that writes, e.g. $SNIP_JOBS_INSTANCE)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF idle_timeout <= interval '0' THEN
        RAISE EXCEPTION 'snip_jobs_fence: idle_timeout % is not positive', idle_timeout USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- In autocommit the row lock would be released as soon as this call
    -- returns, and the program's writes after it would not be fenced.
    IF transaction_timestamp() = statement_timestamp() THEN
        RAISE EXCEPTION 'snip_jobs_fence must be called inside a transaction block: BEGIN first, as a statement of its own'
            USING ERRCODE = 'no_active_sql_transaction',
                  HINT = 'In autocommit the resource''s row would be released when the call returns, and the writes after it would not be fenced.';
    END IF;

    -- fencing.nameSQL's form, after any token an earlier call of this
    -- transaction named. Transaction-local: a SET LOCAL made inside a
    -- function outlives the call (only the function's own SET clause,
    -- search_path, is restored when it returns).
    PERFORM set_config('application_name',
        left(regexp_replace(current_setting('application_name'), ' fence-token=[0-9]+$', ''), 30)
            || ' fence-token=' || snip_jobs_fence.token::text, true);
    IF idle_timeout IS NOT NULL THEN
        PERFORM set_config('idle_in_transaction_session_timeout',
            greatest(ceil(extract(epoch FROM idle_timeout) * 1000), 1)::bigint::text, true);
    END IF;

    -- fencing.advanceSQL: ON CONFLICT DO UPDATE locks the existing row before
    -- testing the WHERE, and at READ COMMITTED a writer that waited for that
    -- lock tests the row as the other writer committed it; the lock is held,
    -- whether or not the row was updated, until the transaction ends.
    INSERT INTO fencing_tokens AS f (resource, token, holder)
    VALUES (snip_jobs_fence.resource, snip_jobs_fence.token, snip_jobs_fence.holder)
    ON CONFLICT (resource) DO UPDATE
        SET token = EXCLUDED.token, holder = EXCLUDED.holder, updated_at = now()
        WHERE f.token <= EXCLUDED.token;
    IF FOUND THEN
        RETURN;
    END IF;
    -- The row is locked by us: what we read is what is stored.
    SELECT f.token, f.holder INTO stored, stored_holder FROM fencing_tokens f WHERE f.resource = snip_jobs_fence.resource;
    RAISE EXCEPTION 'fencing: write to "%" with token % refused: token % (holder "%") has already written to it',
        snip_jobs_fence.resource, snip_jobs_fence.token, stored, stored_holder
        USING ERRCODE = 'SJ001',
              HINT = 'A newer term of the job has written to the resource: this term is over. Roll back and stop; do not retry.';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The schema fencing_tokens is in (public in docs/operations.md's set-up),
-- named in the function's fixed search_path.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION snip_jobs_fence(text, bigint, text, interval) SET search_path = pg_catalog, %I, pg_temp',
        (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'fencing_tokens'::regclass));
END
$$;
-- +goose StatementEnd

REVOKE EXECUTE ON FUNCTION snip_jobs_fence(text, bigint, text, interval) FROM PUBLIC;

COMMENT ON FUNCTION snip_jobs_fence(text, bigint, text, interval) IS
    'Fences the calling transaction''s writes to resource with token, as package fencing does (docs/operations.md, "Fencing from a program"); SQLSTATE SJ001 when a newer token has written.';

-- +goose Down
DROP FUNCTION snip_jobs_fence(text, bigint, text, interval);
