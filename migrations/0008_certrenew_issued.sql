-- certrenew_issued: the certificate URL the CA gave for an order, recorded as
-- soon as lego has it and before the certificate is stored. A term whose
-- store then fails — the fence refused it (a successor's token), the
-- successor ended its transaction (fencing's stale-holder break), the
-- database was unreachable, the process died — leaves the URL for the next
-- leader, which fetches the certificate from the CA, checks it against the
-- order's sealed key and the domain, and stores it in its own fenced
-- transaction instead of ordering again (a second issuance for the same name
-- counts against the CA's limits).
--
-- It is written outside the fence on purpose: the term that writes it may
-- have ended already. Nothing in it is trusted: it only tells the next
-- leader where to look, and what it finds there must match the order that
-- was recorded, fenced, before ordering (docs/certrenew.md, "Recovering an
-- issued certificate").

-- +goose Up
CREATE TABLE certrenew_issued (
    order_id    bigint PRIMARY KEY REFERENCES certrenew_orders (id) ON DELETE CASCADE,
    domain      text NOT NULL,
    cert_url    text NOT NULL CHECK (cert_url LIKE 'https://%'),
    token       bigint NOT NULL,
    instance    text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE certrenew_issued;
