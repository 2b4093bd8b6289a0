-- Click counting: the redirect servers' raw events and the aggregator's counts.
-- The aggregator job (jobs/aggregator) owns this file; the weekly report reads
-- links, link_counts and link_hourly_counts and relies on their columns.
-- docs/aggregator.md explains the design.

-- +goose Up
-- Snip's short links, as far as these jobs need them. The main app owns the
-- real table; IF NOT EXISTS leaves an existing one alone.
CREATE TABLE IF NOT EXISTS links (
    id         bigint      PRIMARY KEY,
    slug       text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Total clicks per link. Every batch of the aggregator updates the rows of
-- the links it saw: free space on each page lets those updates stay on the
-- page (HOT), without touching the index, which makes them about twice as fast.
CREATE TABLE link_counts (
    link_id    bigint      PRIMARY KEY,
    clicks     bigint      NOT NULL CHECK (clicks >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);

-- Clicks per link per UTC hour. Hours are absolute instants, so a report in
-- any whole-hour time zone sums exact local days and weeks, across DST changes.
CREATE TABLE link_hourly_counts (
    link_id bigint      NOT NULL,
    -- date_bin with a UTC origin, not date_trunc('hour', hour): date_trunc
    -- works in the session's TimeZone and would refuse whole UTC hours in a
    -- session set to a half-hour zone (Asia/Kolkata).
    hour    timestamptz NOT NULL CHECK (date_bin('1 hour', hour, '2000-01-01 00:00:00+00') = hour),
    clicks  bigint      NOT NULL CHECK (clicks >= 0),
    PRIMARY KEY (link_id, hour)
-- Rows are updated during their hour (and by late clicks), then only read:
-- less free space than link_counts, for the same HOT updates.
) WITH (fillfactor = 70);
CREATE INDEX link_hourly_counts_hour ON link_hourly_counts (hour);

-- One row per click, inserted by the redirect servers: INSERT (link_id,
-- clicked_at, referrer_host, country) and nothing else. No constraint refuses
-- a bad click here: a redirect must never fail because of its click; the
-- aggregator moves bad ones to click_rejects with a reason.
--
-- txid is the inserting transaction's id, set by the default. The aggregator
-- reads events between two snapshots of the transactions in progress, so a
-- transaction that commits late (a low id after higher ones) is counted in the
-- batch after its commit instead of being skipped. The primary key is the
-- aggregator's index (ranges of txid); a second index on id alone would only
-- slow the redirect servers' inserts.
CREATE TABLE click_events (
    id            bigserial   NOT NULL,
    txid          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    link_id       bigint,
    clicked_at    timestamptz NOT NULL DEFAULT now(),
    referrer_host text,
    country       text,
    -- Computed once at insert, by the producer's transaction, rather than
    -- for every row of every batch by the aggregator, whose scan they would
    -- slow down 2 to 4 times: the UTC hour of the click, and what is wrong
    -- with the event by itself (NULL: nothing). Checks that depend on the
    -- time of the fold (clicked_at too far ahead or too old) and on the links
    -- table are the aggregator's.
    hour          timestamptz NOT NULL
                  GENERATED ALWAYS AS (date_bin('1 hour', clicked_at, '2000-01-01 00:00:00+00')) STORED,
    defect        text
                  GENERATED ALWAYS AS (CASE
                      WHEN link_id IS NULL THEN 'null_link'
                      WHEN country !~ '^[A-Z]{2}$' THEN 'bad_country'
                      WHEN octet_length(referrer_host) > 253 THEN 'bad_referrer'
                  END) STORED,
    PRIMARY KEY (txid, id)
);
-- A producer that wrote txid itself could hide its event below the
-- aggregator's horizon, where it would never be counted: refuse it loudly.
-- NOT VALID, so that pg_dump restores the table's rows before adding the
-- check (a restore runs in another transaction); it is still checked on every
-- insert. Nobody updates click_events. (0007 replaces this check by a
-- statement-level trigger: same guard, without halving COPY's throughput.)
ALTER TABLE click_events ADD CONSTRAINT click_events_xid_is_the_inserter
    CHECK (txid = pg_current_xact_id()) NOT VALID;

-- Events the aggregator refused, with the reason, written in the same
-- transaction as the batch they were in; the event itself stays in
-- click_events and is pruned with the others. Kept until someone deletes
-- them (the aggregator never does).
CREATE TABLE click_rejects (
    event_id      bigint      PRIMARY KEY,
    txid          xid8        NOT NULL,
    link_id       bigint,
    clicked_at    timestamptz NOT NULL,
    referrer_host text,
    country       text,
    reason        text        NOT NULL CHECK (reason IN
                  ('null_link', 'unknown_link', 'future', 'too_old', 'bad_country', 'bad_referrer')),
    rejected_at   timestamptz NOT NULL DEFAULT now(),
    token         bigint      NOT NULL
);
CREATE INDEX click_rejects_rejected_at ON click_rejects (rejected_at);

-- The aggregator's position, one row, updated in the same fenced transaction
-- as the counts of each batch. Every event whose transaction is visible in
-- prev (a pg_snapshot: finished before it was taken) has been folded. target,
-- when set, is the snapshot the batches are moving to: the events visible in
-- target and not in prev are being folded in ranges of txid, and those with
-- txid < cursor_txid are done (NULL: none yet, not even the stragglers of
-- prev's in-progress list).
CREATE TABLE click_aggregator_state (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    prev       pg_snapshot NOT NULL,
    target     pg_snapshot,
    cursor_txid xid8,
    folded     bigint      NOT NULL DEFAULT 0, -- valid events counted, ever
    rejected   bigint      NOT NULL DEFAULT 0, -- events sent to click_rejects, ever
    unpruned   bigint      NOT NULL DEFAULT 0, -- processed events still in click_events
    token      bigint      NOT NULL DEFAULT 0, -- of the last batch
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK (cursor_txid IS NULL OR target IS NOT NULL)
);
-- '1:1:' is a snapshot in which no transaction is visible: everything is new.
INSERT INTO click_aggregator_state (prev) VALUES ('1:1:');

-- When the aggregator's horizon (xmin of prev) passed which transaction id,
-- about once a minute: retention prunes events by txid below the horizon of
-- `retention` ago, without an index on time.
CREATE TABLE click_aggregator_horizons (
    recorded_at timestamptz PRIMARY KEY,
    horizon     xid8        NOT NULL
);

-- +goose Down
DROP TABLE click_aggregator_horizons;
DROP TABLE click_aggregator_state;
DROP TABLE click_rejects;
DROP TABLE click_events;
DROP TABLE link_hourly_counts;
DROP TABLE link_counts;
-- links is left in place: it may be the main app's table.
