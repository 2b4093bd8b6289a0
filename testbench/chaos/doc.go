// Package chaos is snip-jobs' fault-injection suite: it runs the real service
// as three processes, injects the faults production brings, and checks what
// the resources accepted. docs/chaos.md has the results and how to run it.
//
// A run (Run) builds snip-jobs from this module (go build into a temporary
// folder; with the patches of broken.go for Options.Broken and
// Options.BrokenManual), then starts:
//
//   - three etcd members, each its own process (this binary run again with
//     MemberCommand, see MemberMain), so that killing one is a real crash;
//   - a throwaway PostgreSQL (testbench/pgcluster) with the schema migrated,
//     the harness's probe table, and deferred triggers that log, at commit,
//     every row the other jobs write with their term's token (chaos_writes);
//   - Let's Encrypt's test CA in this process (testbench/acmetest: Pebble and
//     challtestsrv), whose validation reaches the instances' HTTP-01 listeners;
//   - three `snip-jobs run` processes. Each reaches every etcd member through
//     its own proxy (testbench/faultproxy), which can hold every byte both ways until a
//     cut heals, as a network partition does to TCP, and PostgreSQL through
//     another, whose latency can be raised.
//     They run every singleton built into the binary: a `sql` probe that
//     inserts (instance, token) every second through the fence, the weekly
//     report (a cron slot every minute), the certificate renewer (every 2 s),
//     and the aggregator (a binary without one of these types is an error).
//     Leases: TTL 2 s, margin TTL/4, keep-alives every TTL/5;
//   - a stream of click events (some invalid, some committed out of id order)
//     and a custom domain every 4 s, written straight to PostgreSQL.
//
// Then it injects Options.Faults faults (every kind once first, then drawn at
// random; see Kind), each followed by a wait until every instance is ready,
// every job has a leader and the probe has been written by its current term.
// An observer watches the leader keys on the etcd members directly and
// timestamps every term's start and end.
//
// With Options.Backend = BackendKubernetes the instances run on
// `leadership.backend: kubernetes` instead: their terms are Leases on a real
// kube-apiserver (testbench/kubetest, over the three etcd members), which
// each reaches through a fault proxy of its own; the observer watches the
// job Leases (a term starts when one names a holder with a new token); the
// faults are KubeKinds (etcd's strike the members beneath the API server,
// and the kube-apiserver is restarted too); and the same checker runs,
// naming terms by job and token (each job Lease counts its own tokens).
// kubestore.go says what this covers and what it does not.
//
// The checker then reads what the resources accepted and reports a Violation
// for each broken invariant (see Invariants): each job's writes (the probe's
// rows, and the other jobs' token-carrying rows), in the order they committed
// (deferred triggers number them at commit), carry tokens that never go down,
// each a term of that job etcd granted to the instance that wrote it;
// fencing_tokens agrees with the probe's; click counts equal the committed
// valid events exactly; one weekly report and one mail per week; at most one
// current certificate per domain, stored by a granted term; each manual run
// executed once, and those of the weekly report and the renewer took effect
// in the transaction that completed them (checkmanual.go); no term started,
// and none acted past its TTL, while etcd had no quorum; the cluster recovered
// after every fault. It also measures, per fault kind, the time without an
// accepted probe write (for faults aimed at a leader, only those that struck
// the probe's) and the time to the successor's term.
//
// Limits: everything runs on one machine, so the clocks of the instances, etcd
// and PostgreSQL are one clock: the suite cannot show what the stop-early
// margin does about clock drift, only what it does about work in flight.
// Timings are measured on a loaded 2-core machine and include that load. The
// observer's timestamps are when the harness received etcd's events: precise
// to a few milliseconds while etcd has a leader, not during a quorum loss
// (the checker compares those windows with the database's timestamps: one
// host, one clock).
package chaos
