-- An operator's "renew this domain's certificate now" (`snip-jobs certs renew
-- DOMAIN`): a key thought compromised, a certificate to re-issue. It rides on
-- certrenew_retry_requests (migration 0009), so that the leader wakes for it
-- and handles it the same way: the next pass makes the current certificate
-- due in its own fenced transaction and deletes the request. A binary from
-- before this migration never sets the column; its retries stay retries.

-- +goose Up
ALTER TABLE certrenew_retry_requests ADD COLUMN renew boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE certrenew_retry_requests DROP COLUMN renew;
