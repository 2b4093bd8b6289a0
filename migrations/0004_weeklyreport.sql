-- Weekly report: one stored report per ISO week and one outbox row per week
-- for Snip's mailer. Package jobs/weeklyreport owns this file; the mailer
-- reads weekly_report_outbox and weekly_reports and sets sent_at (see
-- docs/weekly-report.md for its contract).

-- +goose Up
-- One row per ISO week (e.g. 2026-W47): the primary key makes a second report
-- of a week impossible to store. Written only in fenced transactions; token
-- and instance are the write that produced the current content.
CREATE TABLE weekly_reports (
    week         text        PRIMARY KEY
                             CHECK (week ~ '^[0-9]{4}-W(0[1-9]|[1-4][0-9]|5[0-3])$'),
    job          text        NOT NULL,
    time_zone    text        NOT NULL,
    -- Monday 00:00 and the next Monday 00:00 in time_zone, as instants.
    week_start   timestamptz NOT NULL,
    week_end     timestamptz NOT NULL,
    body         jsonb       NOT NULL,
    body_text    text        NOT NULL,
    body_csv     text        NOT NULL,
    token        bigint      NOT NULL CHECK (token > 0),
    instance     text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- set by an operator's rebuild; a rebuild never queues another mail
    replaced_at  timestamptz,
    replacements integer     NOT NULL DEFAULT 0 CHECK (replacements >= 0),
    CHECK (week_start < week_end),
    CHECK ((replaced_at IS NULL) = (replacements = 0))
);
CREATE INDEX weekly_reports_latest ON weekly_reports (week_start DESC);

-- One message per week for Snip's mailer, inserted in the same transaction as
-- the report. The mailer sends the report's current body_text/body_csv and
-- sets sent_at; it never deletes rows (the unique week is what stops a second
-- message).
CREATE TABLE weekly_report_outbox (
    id         bigserial   PRIMARY KEY,
    week       text        NOT NULL UNIQUE REFERENCES weekly_reports (week),
    subject    text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz
);
CREATE INDEX weekly_report_outbox_unsent ON weekly_report_outbox (id) WHERE sent_at IS NULL;

-- +goose Down
DROP TABLE weekly_report_outbox;
DROP TABLE weekly_reports;
