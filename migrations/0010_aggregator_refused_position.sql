-- click_aggregator_state.refused_prev: the stored position (prev, as text) a
-- batch refused because it is not earlier than the database's snapshot: it
-- comes from another cluster's transaction ids (a pg_dump restore). Written
-- by the refusing batch itself, in its fenced transaction, so that every later
-- batch — after a failover or a restart too — refuses the same position, even
-- once this cluster's ids have overtaken it (folding from it then would skip
-- the events inserted meanwhile). The reset of docs/aggregator.md ("After a
-- pg_dump restore") moves prev on, which ends the refusal.

-- +goose Up
ALTER TABLE click_aggregator_state ADD COLUMN refused_prev text;

-- +goose Down
ALTER TABLE click_aggregator_state DROP COLUMN refused_prev;
