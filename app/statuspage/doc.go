// Package statuspage is the HTML status page that every snip-jobs instance
// serves on its admin listener: the jobs (singleton or not, leader, token,
// since, lease time left, last run and result), the instances (up, how many
// jobs each leads), and a timeline of the terms of each singleton over the last
// few minutes, drawn as SVG — who led when, with which token, the gaps with no
// leader, and the writes the fence refused.
//
// The page is server-rendered: HTML, the SVG and CSS are complete without
// JavaScript (the page then reloads itself every few seconds). A little
// JavaScript, embedded like the rest (no build step), swaps in a fresh rendering
// every second, and turns the dev buttons into requests that do not leave the
// page. Routes, all GET, under /status/ (package admin mounts the handler):
//
//   - /status/              the page (?window=10m: 30s to 1h; default: the
//     history's age rounded up, at most 5m, so a young cluster fills the width)
//   - /status/live          the page's live part alone, for the script
//   - /status/cluster.json  the same data as JSON (Snapshot)
//   - /status/static/…      style.css and page.js
//
// Where the data comes from: package scheduler/status reads it, in the one
// status model that `snip-jobs status` and /status show too. The leaders,
// their lease time left (on Kubernetes: when their instance Lease was last
// renewed) and the instances that are up are read from the leadership
// backend (Config.Leadership, package clusterview); last runs, last cron slots, the term history
// (job_terms) and refused writes (fence_rejections) from PostgreSQL, with the
// database's clock, so the timeline compares instants written by different
// servers. Each
// request reads the whole cluster, not only this instance; reads are shared by
// requests within half a second of each other, so open tabs do not multiply
// the load.
//
// Each term's tooltip says why it ended, in the words of EndReason (the reason
// its instance recorded) or, in dev, of the supervisor (a process it killed or
// paused records nothing).
//
// What the timeline guarantees: a term is drawn from its recorded start to its
// recorded end (its successor records the end of a term its instance left
// open, when it starts, and the tooltip says who recorded it); a term whose
// end was never recorded (its successor's record failed too) ends where its
// successor starts; a term whose own instance recorded its end after the end
// drawn (an instance that was paused and noticed late) has the late part
// drawn apart as a thin tail. An open term with no successor is "ongoing" if the
// backend names it the leader, and "lost" otherwise. A gap is the time between the end
// of one term and the start of the next (or now, when nobody leads): the
// stretch before the first recorded term of the window is not called a gap,
// since the history may simply not reach back that far (a cluster that just
// started).
//
// What it does NOT guarantee: that the history is complete. job_terms and
// fence_rejections are bookkeeping written best-effort outside the fence (see
// migrations/0006_terms.sql); a term whose start could not be recorded (the
// database was down) is missing from the timeline though the backend shows it
// as the leader in the jobs table. "Since" uses the leader's wall clock and is for
// people only.
//
// In development (snip-dev), Config.DevControl names the dev
// supervisor: the page then shows each instance's process state (running,
// paused, exited) and buttons that ask the supervisor to kill, pause, resume or
// restart an instance, or to make a job's leader resign. The page itself never
// changes anything: those requests go to the supervisor, which runs only in
// dev. Outside dev there are no buttons.
//
// Access: the page is served on the admin listener, loopback-only by default
// like /metrics and /status; it shows instance names, hosts, process ids and
// job names, never secrets.
package statuspage
