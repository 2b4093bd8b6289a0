-- Click counting: the redirect servers' raw events and the aggregator's counts.
-- The aggregator job (jobs/aggregator) owns this file; the weekly report reads
-- links, link_counts and link_hourly_counts and relies on their columns.

-- +goose Up
-- Snip's short links, as far as these jobs need them. The main app owns the
-- real table; IF NOT EXISTS leaves an existing one alone.
CREATE TABLE IF NOT EXISTS links (
    id         bigint      PRIMARY KEY,
    slug       text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Total clicks per link.
CREATE TABLE link_counts (
    link_id    bigint      PRIMARY KEY,
    clicks     bigint      NOT NULL CHECK (clicks >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Clicks per link per UTC hour. Hours are absolute instants, so a report in
-- any whole-hour time zone sums exact local days and weeks, across DST changes.
CREATE TABLE link_hourly_counts (
    link_id bigint      NOT NULL,
    hour    timestamptz NOT NULL CHECK (date_trunc('hour', hour) = hour),
    clicks  bigint      NOT NULL CHECK (clicks >= 0),
    PRIMARY KEY (link_id, hour)
);
CREATE INDEX link_hourly_counts_hour ON link_hourly_counts (hour);

-- +goose Down
DROP TABLE link_hourly_counts;
DROP TABLE link_counts;
-- links is left in place: it may be the main app's table.
