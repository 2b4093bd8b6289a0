// Package devcluster is snip-dev: a whole local Snip jobs cluster in one
// process tree, for a newcomer to watch it work and fail over, and for trying
// changes by hand.
//
// Start brings up, in this order: a throwaway PostgreSQL from the machine's
// server binaries (package pgcluster; an error naming the Debian package
// postgresql-15 if they are missing), with every migration applied and demo
// data (links, two weeks of hourly counts for the weekly report, custom domains
// when the table exists, and a dev-only table for the heartbeat job); an
// embedded single-member etcd (package etcdlocal) or, with Config.Backend
// kubernetes, a local kube-apiserver (package kubeapi, only from the binary
// already in the cache: backend.go, backend_kube.go); the supervisor's HTTP
// control server; and the instances (three by default) as child processes —
// the same binary re-executed as `snip-jobs run --config <generated file>
// --dev-control <supervisor URL>` — so that killing or pausing one is a real
// SIGKILL or SIGSTOP of a real process. It returns once every instance answers
// /readyz. A feeder then inserts a stream of clicks on one viral link: into
// click_events when the aggregator job is part of the demo (it folds them into
// counts), straight into link_hourly_counts and link_counts otherwise, so that
// the weekly report always has something to count.
//
// The demo jobs (demo.go) are chosen by the job types built into the binary:
// each entry names the type it needs and is left out while that type is not
// registered, so a job joins the demo by being added to the registry (the
// aggregator did). The certificate renewer also needs an ACME test CA with its
// DNS: startCA (ca.go) starts an in-process Pebble with challtestsrv when the
// certrenew type is built in, and the renewer's entry points at it; without
// the type there is no CA and the entry is left out.
//
// The supervisor's control server (control.go) answers GET /dev/state (the
// children: pid, running / paused / exited / restarting, status page URL) and
// POST /dev/kill, /dev/pause, /dev/resume, /dev/restart (?instance=NAME, or
// ?job=NAME for the job's current leader; /dev/resume alone resumes every
// paused instance; /dev/restart answers once the instance is ready) and
// /dev/resign?job=NAME. The status pages' buttons post
// there. It listens on 127.0.0.1 only and refuses requests whose Origin is not
// one of the cluster's own pages (a web page elsewhere cannot drive it); a
// request without Origin (curl) is accepted.
//
// Narrate (narrate.go, why.go) says every change of leader as the backend
// reports it, and why each term ended, in the status page's words
// (statuspage.EndReason): the reason its instance recorded in job_terms just
// after handing over (resign, rebalance, shutdown, watchdog, expired...), or
// what the supervisor did to the process (killed, paused), since such an
// instance records nothing and etcd alone cannot tell a resignation from a
// lease that ran out. /dev/state carries those words (Ends) for the pages'
// timelines.
//
// While an instance's process is not running, the supervisor answers its port
// itself (down.go): 503 and a page that says so, links to the instances that
// run and a restart button. It serves a duplicate of the held socket and
// steps aside before the next process starts, so that process gets every
// connection.
//
// Close stops everything and removes all of it: the children get SIGTERM (a
// clean hand-over) and SIGKILL after a bound; then etcd and PostgreSQL stop
// and every temporary folder is removed. The children and the postmaster have
// parent-death signals (package pdeathsig), so a supervisor killed with
// SIGKILL takes them with it; its folders then stay behind, and the next Start
// removes them (their dev.pid names a process that is gone).
//
// What is NOT provided: anything durable or secure. PostgreSQL trusts every
// local connection, etcd has neither TLS nor auth, and every piece listens on
// loopback only. It is for a developer's machine, never for a server.
package devcluster
