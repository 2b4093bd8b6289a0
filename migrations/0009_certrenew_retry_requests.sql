-- certrenew_retry_requests: an operator's "try this domain again now"
-- (`snip-jobs certs retry DOMAIN`), once the cause of its failures is fixed.
-- The operator writes only this request, never the renewer's state: the
-- leader's next pass reads it, clears the domain's back-off in its own fenced
-- transaction and deletes the request, so every write to certrenew_domains
-- stays behind the job's fence. A request also wakes the leader between
-- passes (new_domain_check), like a new domain does.

-- +goose Up
CREATE TABLE certrenew_retry_requests (
    domain       text        PRIMARY KEY, -- the certificate name (ASCII), as certrenew_domains has it
    requested_at timestamptz NOT NULL DEFAULT now(),
    requested_by text        NOT NULL
);

-- +goose Down
DROP TABLE certrenew_retry_requests;
