-- Notifications for the readers of the renewer's tables, so they serve from
-- memory instead of querying per TLS handshake or per HTTP-01 request
-- (package jobs/certrenew/certserve). A trigger, not a NOTIFY written in each
-- storing transaction: every writer is covered (the renewer, a re-seal, an
-- operator's DELETE), and PostgreSQL delivers the notification only when the
-- writing transaction commits.
--
-- certrenew_certificates: the payload is the domain whose current certificate
-- may have changed; the reader re-reads that domain.
-- certrenew_challenges: the payload carries the whole row (JSON, well under
-- NOTIFY's 8000 bytes: a token is at most 256 characters, a domain 253), so a
-- challenge is served without a query; "ttl" is the seconds left before
-- expires_at on the database's clock.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION certrenew_certificates_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('certrenew_certificates', OLD.domain);
    ELSE
        PERFORM pg_notify('certrenew_certificates', NEW.domain);
        IF TG_OP = 'UPDATE' AND OLD.domain <> NEW.domain THEN
            PERFORM pg_notify('certrenew_certificates', OLD.domain);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER certrenew_certificates_notify
    AFTER INSERT OR UPDATE OR DELETE ON certrenew_certificates
    FOR EACH ROW EXECUTE FUNCTION certrenew_certificates_notify();

-- +goose StatementBegin
CREATE FUNCTION certrenew_challenges_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('certrenew_challenges', json_build_object('op', 'delete', 'token', OLD.token)::text);
    ELSE
        IF TG_OP = 'UPDATE' AND OLD.token <> NEW.token THEN
            PERFORM pg_notify('certrenew_challenges', json_build_object('op', 'delete', 'token', OLD.token)::text);
        END IF;
        PERFORM pg_notify('certrenew_challenges', json_build_object('op', 'set', 'token', NEW.token,
            'domain', NEW.domain, 'key_auth', NEW.key_auth,
            'ttl', extract(epoch FROM NEW.expires_at - now()))::text);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER certrenew_challenges_notify
    AFTER INSERT OR UPDATE OR DELETE ON certrenew_challenges
    FOR EACH ROW EXECUTE FUNCTION certrenew_challenges_notify();

-- +goose Down
DROP TRIGGER certrenew_challenges_notify ON certrenew_challenges;
DROP FUNCTION certrenew_challenges_notify();
DROP TRIGGER certrenew_certificates_notify ON certrenew_certificates;
DROP FUNCTION certrenew_certificates_notify();
