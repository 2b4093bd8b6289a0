// Package aggregator is the job type that folds the redirect servers' click
// events (table click_events) into the total per link (link_counts) and the
// count per link and UTC hour (link_hourly_counts), continuously, as a
// singleton. docs/aggregator.md gives the design and its argument.
//
// What is guaranteed: every committed event is counted exactly once, or
// copied to click_rejects with a reason exactly once, whatever the order in
// which producers commit, and whatever happens to the job: a leader killed
// mid-batch, a paused leader that wakes up after a successor started,
// PostgreSQL restarting, two aggregators at once. Each batch is one
// transaction that reads the aggregator's position, adds the batch's counts,
// writes its rejects and moves the position on; all of it commits or none.
// The transaction is fenced (scheduler.Run.Fenced), so a stale term is
// refused before it reads anything, and it locks the position's row, so
// batches run one after the other even without the fence.
//
// The position is not an event id. A bigserial id is taken when a producer
// inserts, not when it commits, so "id > last id seen" skips an event whose
// transaction commits late. The position is a pair of PostgreSQL snapshots
// (pg_current_snapshot): every event has the id of the transaction that
// inserted it (column txid, set by its default and checked), and a batch
// folds the events of transactions that had finished by the newer snapshot
// but not by the older one. A transaction that was still open at a snapshot
// is in that snapshot's in-progress list and is folded in the first batch
// after it finished, however late; it delays nothing else.
//
// What is NOT guaranteed: an exact time. An event is counted in the first
// batch that starts after its commit, normally within Options.Interval plus
// one batch. A batch holds at least one producer transaction's events, so a
// producer that commits millions of events at once makes one long batch.
// Processed events are deleted (or, with Options.Retention, kept that long)
// only while the job has caught up; under an endless backlog the table
// grows. The check that an event is valid uses the links table as the
// batch's counting statement sees it; a link deleted later keeps its counts.
// A producer's transaction that stays open for hours delays only its own
// events, but also keeps PostgreSQL from cleaning up dead rows, which slows
// every scan. After a pg_dump restore into another cluster, the stored
// position is another numbering of transactions: batches refuse it (and
// record the refusal, for every later term) until an operator resets it
// (docs/aggregator.md); the evidence for a cluster change relies on event ids
// coming from the table's sequence.
//
// Idle means idle: once caught up, the job reads whether any event (or a
// prune) is waiting before it opens a fenced transaction, so a job with
// nothing to do writes nothing (docs/aggregator.md, "Idle means idle").
//
// Metrics (with the job's name as label "job"): snip_aggregator_events_folded_total,
// snip_aggregator_events_rejected_total{reason}, snip_aggregator_batches_total,
// snip_aggregator_batch_duration_seconds, snip_aggregator_backlog_events,
// snip_aggregator_events_pruned_total, snip_aggregator_errors_total,
// snip_aggregator_idle_polls_total.
package aggregator
