// Package weeklyreport is the weekly click report: a cron job (type
// "weeklyreport", by default on Mondays at 08:00 in the job's time zone) that
// reports the previous calendar week from the aggregator's hourly counts
// (link_hourly_counts, links), stores it once per ISO week and queues it once
// for Snip's mailer. Show and Print read stored reports; Rebuild replaces one.
//
// Each run reports the last calendar week that ended at or before its cron
// slot: Monday 00:00 to the next Monday 00:00 in the job's time zone (its
// timezone:, the zone its cron spec is read in), so a week lasts 167 or 169
// hours when clocks change in it, and each of its seven days is summed from
// exactly the UTC hours it covers (23, 24 or 25). The report holds the week's
// total, the clicks of each day, the top links and two growth lists against
// the week before; see Report.
//
// What is guaranteed:
//   - At most one stored report and one outbox row per ISO week: the week is
//     the primary key of weekly_reports and unique in weekly_report_outbox.
//     A run whose week is already stored (the same slot called again, another
//     slot of that week, another weeklyreport job) stores nothing.
//   - The report, its outbox row and the completion of the cron slot
//     (scheduler.Run.CompleteSlot) commit in one transaction fenced by the
//     run's token: either all three are done or none is, and a run whose token
//     is older than one that has written for the job is refused
//     (*fencing.StaleTokenError) with nothing written.
//   - The same counts give the same report: every list is fully ordered, and
//     the counts are read in one statement (one snapshot).
//   - Rebuild replaces a stored report in place, fenced the same way, and
//     never adds a row or a mail. RebuildRun fences it on the resource the
//     week's own runs use (in database mode, the week's slot's) with a token
//     newer than theirs (in database mode, from the claims' sequence: no etcd).
//
// What is NOT guaranteed:
//   - That the report counts every click of its week: it counts what the
//     aggregator had counted when the run read link_hourly_counts. Clicks
//     counted later (aggregator lag over the slot) appear only after a
//     Rebuild. The default slot, eight hours after the week ends, is the
//     margin.
//   - That the mail is sent exactly once: the outbox row is queued exactly
//     once, and sending is the mailer's (see docs/weekly-report.md).
//   - That a slot runs at all: whether missed slots are caught up is the
//     scheduler's catch_up policy.
//
// Time zones whose UTC offset is not a whole number of hours (Asia/Kolkata,
// Asia/Kathmandu, Australia/Lord_Howe) are refused when the job is built: an
// hourly count cannot be split between two local days. The check covers 2020
// to 2099; a week outside that range is checked again when it is built.
package weeklyreport
