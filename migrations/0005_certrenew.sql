-- Certificate renewer: one current certificate per customer domain, the shared
-- ACME account, HTTP-01 challenge tokens served by every instance, and the
-- renewer's own bookkeeping (terms, per-domain order state, order log).
-- Package jobs/certrenew owns this file; docs/certrenew.md explains the design.
-- Every table here but custom_domains (which the renewer only reads) is
-- written only in transactions fenced by the certrenew job's token (package
-- fencing). The renewer's one unfenced table is certrenew_order_urls
-- (migration 0008), written by recordURLs in jobs/certrenew/order.go: it notes
-- the CA's order and certificate URLs the moment the CA gives them, possibly
-- after the writing term has ended, and nothing in it is trusted, so the next
-- leader can fetch a certificate the CA issued instead of ordering it again.

-- +goose Up
-- Customers' custom domains, as far as the renewer needs them. The main Snip
-- app owns the real table; IF NOT EXISTS leaves an existing one alone. The
-- renewer reads it and never writes it.
CREATE TABLE IF NOT EXISTS custom_domains (
    domain   text        PRIMARY KEY,
    added_at timestamptz NOT NULL DEFAULT now(),
    status   text        NOT NULL DEFAULT 'active'
);

-- The one ACME account of all instances, per directory URL. The key is
-- stored (sealed) before the account is registered, so a term that dies
-- between the two leaves a key its successor registers again: newAccount with
-- a known key returns the existing account, so the CA never sees two.
CREATE TABLE certrenew_account (
    directory     text        PRIMARY KEY,
    email         text        NOT NULL DEFAULT '',
    key_sealed    bytea       NOT NULL,
    key_id        text        NOT NULL,
    account_url   text,
    token         bigint      NOT NULL CHECK (token > 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    registered_at timestamptz
);

-- One row per term that ran the renewer. 'running' from the start of a pass
-- until the pass ended while the term was still good ('idle'); a row left
-- 'running' belongs to a term that ended by expiry (or a crash) in the middle
-- of a pass, and its successor waits lock_delay after seen_at before
-- ordering, then marks it 'lapsed'.
CREATE TABLE certrenew_terms (
    job        text        NOT NULL,
    token      bigint      NOT NULL CHECK (token > 0),
    instance   text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now(),
    state      text        NOT NULL CHECK (state IN ('running', 'idle', 'lapsed')),
    PRIMARY KEY (job, token)
);

-- Renewer-wide state: a pause after the CA answered 503 (or an account-wide
-- rate limit), honoured by whichever instance leads next.
CREATE TABLE certrenew_job (
    job          text        PRIMARY KEY,
    paused_until timestamptz,
    pause_reason text,
    token        bigint      NOT NULL CHECK (token > 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- custom_domains rows that cannot get a certificate, with the reason. Rows go
-- when the domain is fixed or removed.
CREATE TABLE certrenew_invalid_domains (
    domain     text        PRIMARY KEY,
    code       text        NOT NULL,
    reason     text        NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now(),
    last_seen  timestamptz NOT NULL DEFAULT now(),
    token      bigint      NOT NULL CHECK (token > 0)
);

-- Per certificate name (the ASCII form of a valid custom domain): the order in
-- flight, written before the CA is asked, and the failures that back it off.
CREATE TABLE certrenew_domains (
    domain            text        PRIMARY KEY,
    source            text        NOT NULL,   -- the custom_domains.domain it came from
    order_id          bigint,                 -- certrenew_orders.id of the order in flight
    order_token       bigint,                 -- the term that started it
    order_instance    text,
    order_started_at  timestamptz,
    order_replaces    text,                   -- ARI CertID sent as "replaces"
    order_key_sealed  bytea,                  -- the certificate key the order uses, so a successor reuses it
    order_key_id      text,
    attempt           integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),   -- orders since the last success
    failures          integer     NOT NULL DEFAULT 0 CHECK (failures >= 0),  -- consecutive failed orders
    next_attempt_at   timestamptz,            -- no order before this (backoff, Retry-After)
    last_error        text,
    last_error_reason text,
    last_error_at     timestamptz,
    token             bigint      NOT NULL CHECK (token > 0),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK ((order_token IS NULL) = (order_started_at IS NULL))
);

-- Certificates, the current one and those it replaced. The private key is
-- sealed with AES-256-GCM under the key named by key_id (docs/certrenew.md,
-- "Secrets"); the unique index allows one current certificate per name.
CREATE TABLE certrenew_certificates (
    id             bigserial   PRIMARY KEY,
    domain         text        NOT NULL,
    current        boolean     NOT NULL DEFAULT true,
    chain_pem      text        NOT NULL,
    key_sealed     bytea       NOT NULL,
    key_id         text        NOT NULL,
    serial         text        NOT NULL,
    ari_cert_id    text        NOT NULL,     -- RFC 9773 CertID: what a renewal sends as "replaces"
    not_before     timestamptz NOT NULL,
    not_after      timestamptz NOT NULL,
    renew_at       timestamptz NOT NULL,     -- the chosen renewal instant (inside the ARI window, or the fallback)
    ari_start      timestamptz,
    ari_end        timestamptz,
    ari_next_check timestamptz NOT NULL,
    replaces_id    bigint      REFERENCES certrenew_certificates (id) ON DELETE SET NULL,
    replaces_sent  text,                     -- the "replaces" the order asked for
    ari_conflict   boolean     NOT NULL DEFAULT false, -- the CA answered 409 alreadyReplaced; lego re-ordered without "replaces"
    order_id       bigint,
    token          bigint      NOT NULL CHECK (token > 0),
    instance       text        NOT NULL,
    stored_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (not_before < not_after)
);
CREATE UNIQUE INDEX certrenew_certificates_one_current ON certrenew_certificates (domain) WHERE current;
CREATE INDEX certrenew_certificates_domain ON certrenew_certificates (domain, id DESC);

-- Every order asked of the CA: the log, and what the budget per 3 h counts.
-- Inserted in the same fenced transaction that marks the order in flight.
CREATE TABLE certrenew_orders (
    id           bigserial   PRIMARY KEY,
    domain       text        NOT NULL,
    token        bigint      NOT NULL CHECK (token > 0),
    instance     text        NOT NULL,
    replaces     text,
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    result       text        CHECK (result IN ('issued', 'failed', 'abandoned')), -- NULL while in flight
    reason       text,
    error        text,
    ari_conflict boolean     NOT NULL DEFAULT false
);
CREATE INDEX certrenew_orders_started ON certrenew_orders (started_at);

-- HTTP-01 key authorizations, written by the ordering instance and served by
-- every instance's challenge listener for the matching Host only.
CREATE TABLE certrenew_challenges (
    token       text        PRIMARY KEY,
    domain      text        NOT NULL,
    key_auth    text        NOT NULL,
    fence_token bigint      NOT NULL CHECK (fence_token > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE INDEX certrenew_challenges_expires ON certrenew_challenges (expires_at);

-- +goose Down
DROP TABLE certrenew_challenges;
DROP TABLE certrenew_orders;
DROP TABLE certrenew_certificates;
DROP TABLE certrenew_domains;
DROP TABLE certrenew_invalid_domains;
DROP TABLE certrenew_job;
DROP TABLE certrenew_terms;
DROP TABLE certrenew_account;
-- custom_domains belongs to the main app: left alone.
