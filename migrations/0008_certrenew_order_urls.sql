-- certrenew_order_urls: what the CA said about each order, noted the moment
-- it says it: the order's URL (its answer to newOrder) and, once the order is
-- valid, the certificate's URL. A term that cannot finish an order — its term
-- ended between finalize and the CA's "valid", the fence refused its store
-- (a successor's token), a successor ended its transaction (fencing's
-- stale-holder break), its process died — leaves them for the next leader,
-- which asks the CA about that order, fetches the certificate if it was
-- issued, checks it against the order's sealed key and the domain, and stores
-- it in its own fenced transaction instead of ordering again (a second
-- issuance for the same name counts against the CA's limits).
--
-- Written outside the fence on purpose: the term writing it may have ended.
-- Nothing in it is trusted: it only tells the next leader where to look, and
-- what it finds there must match the order that was recorded, fenced, before
-- ordering (docs/certrenew.md, "Recovering an issued certificate").

-- +goose Up
CREATE TABLE certrenew_order_urls (
    order_id    bigint PRIMARY KEY REFERENCES certrenew_orders (id) ON DELETE CASCADE,
    domain      text NOT NULL,
    order_url   text CHECK (order_url LIKE 'https://%'),
    cert_url    text CHECK (cert_url LIKE 'https://%'),
    token       bigint NOT NULL,
    instance    text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    CHECK (order_url IS NOT NULL OR cert_url IS NOT NULL)
);

-- +goose Down
DROP TABLE certrenew_order_urls;
