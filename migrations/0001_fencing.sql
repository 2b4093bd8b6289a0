-- Fencing tokens: for each resource, the highest token (leader term) that has
-- written to it. Package fencing advances a row inside every fenced write's
-- transaction and refuses a write whose token is lower than the stored one.

-- +goose Up
CREATE TABLE fencing_tokens (
    resource   text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token > 0),
    holder     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE fencing_tokens IS
    'Highest fencing token (leader term) seen per resource; written only by package fencing.';

-- +goose Down
DROP TABLE fencing_tokens;
