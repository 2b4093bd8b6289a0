-- Caps on what operators write into the controls (docs/operations.md,
-- "Pausing, running and draining"): a reason (`pause --reason`, `drain
-- --reason`) holds at most 500 characters, who asked (`--by`, by default
-- user@host) at most 200. Every instance reads the controls at each
-- notification and every renew interval, and every status page shows them
-- on each refresh: a 10 MB reason written straight into the table made every
-- status page 21 MB, refreshed each second. The commands refuse longer text
-- before they connect (package scheduler/controls: MaxReason, MaxBy); these
-- constraints hold whoever writes, and the commands name them when the
-- database refuses (controls.TextTooLongError).
--
-- Existing rows longer than a cap are cut to it first (their first
-- characters, then '…'), and the constraints are then added validated:
-- NOT VALID would leave such a row in place, still read by every instance
-- and shown by every status page, which is the harm the caps exist to end.
-- What is cut is an operator's note; the pause, the drain and the run
-- request themselves are unchanged.

-- +goose Up
UPDATE job_pauses SET reason = left(reason, 499) || '…' WHERE char_length(reason) > 500;
UPDATE job_pauses SET paused_by = left(paused_by, 199) || '…' WHERE char_length(paused_by) > 200;
UPDATE instance_drains SET reason = left(reason, 499) || '…' WHERE char_length(reason) > 500;
UPDATE instance_drains SET drained_by = left(drained_by, 199) || '…' WHERE char_length(drained_by) > 200;
UPDATE manual_runs SET requested_by = left(requested_by, 199) || '…' WHERE char_length(requested_by) > 200;

ALTER TABLE job_pauses
    ADD CONSTRAINT job_pauses_reason_length CHECK (char_length(reason) <= 500),
    ADD CONSTRAINT job_pauses_paused_by_length CHECK (char_length(paused_by) <= 200);
ALTER TABLE instance_drains
    ADD CONSTRAINT instance_drains_reason_length CHECK (char_length(reason) <= 500),
    ADD CONSTRAINT instance_drains_drained_by_length CHECK (char_length(drained_by) <= 200);
ALTER TABLE manual_runs
    ADD CONSTRAINT manual_runs_requested_by_length CHECK (char_length(requested_by) <= 200);

-- +goose Down
ALTER TABLE manual_runs DROP CONSTRAINT manual_runs_requested_by_length;
ALTER TABLE instance_drains
    DROP CONSTRAINT instance_drains_drained_by_length,
    DROP CONSTRAINT instance_drains_reason_length;
ALTER TABLE job_pauses
    DROP CONSTRAINT job_pauses_paused_by_length,
    DROP CONSTRAINT job_pauses_reason_length;
