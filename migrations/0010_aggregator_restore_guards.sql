-- Guards of the aggregator's position (click_aggregator_state) against a
-- logical restore into another cluster, whose transaction ids are another
-- numbering (docs/aggregator.md, "After a pg_dump restore"):
--
-- refused_prev: the stored position (prev, as text) a batch refused because it
-- is not earlier than the database's snapshot. Written by the refusing batch
-- itself, in its fenced transaction, so that every later batch — after a
-- failover or a restart too — refuses the same position, even once this
-- cluster's ids have overtaken it (folding from it then would skip the events
-- inserted meanwhile).
--
-- cluster_id: the system identifier (pg_control_system()) of the cluster the
-- last batch ran on. prev_max_id / target_max_id: the last event id the
-- sequence had handed out when prev / target was taken (read after the
-- snapshot). On one numbering, every event of a transaction visible in prev
-- has an id at most prev_max_id. When a batch finds itself on another cluster,
-- an event with a higher id whose transaction looks visible in prev proves a
-- different numbering: the position is refused (and the refusal recorded).
-- Without one (a pg_upgrade or a physical copy, which keep the numbering), the
-- batch records the new cluster and carries on.
--
-- The reset moves prev on and clears these, which ends a refusal.

-- +goose Up
ALTER TABLE click_aggregator_state
    ADD COLUMN refused_prev  text,
    ADD COLUMN cluster_id    bigint,
    ADD COLUMN prev_max_id   bigint,
    ADD COLUMN target_max_id bigint;

-- +goose Down
ALTER TABLE click_aggregator_state
    DROP COLUMN refused_prev,
    DROP COLUMN cluster_id,
    DROP COLUMN prev_max_id,
    DROP COLUMN target_max_id;
