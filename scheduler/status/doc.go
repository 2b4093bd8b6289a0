// Package status is the one model of what snip-jobs shows about its jobs and
// instances, and the reads that fill it. `snip-jobs status` (its table and its
// --json), the status page (/status/ and /status/cluster.json) and an
// instance's own /status all show these types:
//
//   - Job: a job of the config file. The cluster's view (Read) fills Leader
//     from the leadership backend and LastRun and LastSlot from PostgreSQL; an instance's own
//     view (the scheduler's Status) fills Leading, Token, Since and Headroom
//     from the term it holds, and LastRun from memory.
//   - Leader and Instance: the holder of a job's term and an instance that is
//     up, as the leadership backend says: Source.Leadership reads it
//     (package clusterview: etcd's leader keys and registrations, or the
//     Kubernetes backend's Leases), so that this package imports neither.
//     Etcd counts a lease down on its own clock; a Kubernetes Lease is
//     judged by its peers' clocks, which a one-shot read cannot do, so there
//     Read reports the Lease's renewTime (Renewed) and Up is a guess from
//     it (see Instance.Renewed).
//   - RunRecord, SlotRecord, TermRecord and Rejection: the scheduler's records
//     in job_runs, cron_slots, job_terms and fence_rejections.
//
// Read needs no running instance: it reads the backend and PostgreSQL from
// anywhere.
// What it cannot read is listed in Cluster.Errors and the rest is filled in.
//
// What is NOT guaranteed: that the records are complete. job_runs, job_terms
// and fence_rejections are bookkeeping written best-effort outside the fence
// (migrations/0006_terms.sql), so a term whose start could not be recorded is
// missing from History though the backend names its leader. Times written by
// different hosts (a leader's Since, an instance's Started) are their wall
// clocks, for people; the records' times are the database's.
package status
