// Package kubelease keeps package leadership's terms (a token, a monotonic
// deadline, a context that ends with the term, a cheap Valid) on
// coordination.k8s.io/v1 Leases, for deployments that have a Kubernetes API
// server and no etcd of their own. NewSession returns a *leadership.Session
// on a Lease store; NewCluster what an operator's command reads and asks.
//
// Layout, in one namespace, every Lease labelled jobs.snip.dev/set=<prefix>:
//
//   - <prefix>-instance-<instance> (jobs.snip.dev/role=instance): one per
//     process, the only Lease renewed. Its holderIdentity is
//     "<instance>/<random>", new for each incarnation (the etcd backend's
//     lease ID); renewTime is bumped every renew interval by an update
//     under the resourceVersion last written. O(1) writes per process,
//     whatever the number of jobs. Annotations jobs.snip.dev/host, /pid,
//     /proc-start and /pid-ns name the process, for people and for death
//     reclaim.
//   - <prefix>-job-<job> (jobs.snip.dev/role=job): holderIdentity names the
//     incarnation that leads the job, annotation jobs.snip.dev/instance-lease
//     its instance Lease, and annotation jobs.snip.dev/token the fencing
//     token. Written only when a term starts or resigns, and patched by an
//     operator's resign request (annotation jobs.snip.dev/resign-token).
//
// Reading without a session (snip-jobs status, resign): Cluster.ReadSet
// lists the set's Leases once; a job's leader is its job Lease's holder while that
// holder's instance Lease names it too. Whether that holder still renews,
// a one-shot read cannot judge as peers do (unchanged for the duration on
// their own clock): it gets renewTime, the holder's wall clock.
//
// A Term carries:
//
//   - Token: the job Lease's jobs.snip.dev/token, which every new term sets
//     to the previous value + 1 in the same update that names its holder,
//     under the resourceVersion read (compare-and-swap). Two terms cannot
//     both bump from the same value, so tokens of a job strictly increase.
//     Never the resourceVersion itself, which is opaque. Resign releases the
//     job Lease (holder cleared, token kept) rather than delete it: a deleted
//     job Lease would restart the count at 1, and then package fencing would
//     refuse the new terms' writes (safe, but stuck until the fencing row is
//     reset). Do not delete job Leases by hand.
//   - Deadline: the monotonic send time of the newest successful renewal of
//     the instance Lease (or of its creation) + TTL − margin, shared by all
//     the process's terms, with leadership's own arithmetic.
//   - Context: ends at the first of: deadline passed (ReasonExpired), the
//     instance Lease changed or deleted by someone else (ReasonLeaseLost),
//     the job Lease deleted or recording another term (ReasonKeyLost),
//     Resign (ReasonResigned), Close (ReasonShutdown).
//   - Valid: no I/O, no allocation: a flag and an atomic word.
//
// The takeover rule. A job Lease may be taken when it is absent, released,
// or its holder is gone. The holder is gone when its instance Lease (read
// from the API server, not a cache) is absent or names another holder, or
// when the candidate has seen the same version of it (resourceVersion) for
// its leaseDurationSeconds on the candidate's own monotonic clock, as
// client-go's leaderelection judges. In that last case the candidate first
// marks the instance Lease released and expired (annotation
// jobs.snip.dev/expired-by) in an update under the resourceVersion it saw:
// a renewal racing it fails, so the holder's last successful renewal is the
// one that wrote the version seen. Changes are learnt by watch, not by
// polling: one watch per session of every Lease of the set, whatever the
// number of jobs, campaigns and terms. A campaign judges the job Lease from
// that watch's copy; a stale copy only makes its write, made under the
// copy's resourceVersion, fail.
//
// The clock argument. The candidate first saw that version no earlier than
// it was written, and it was written no earlier than its renewal was sent.
// So the candidate takes over at least TTL after the holder's send time,
// measured on the candidate's clock, while the holder stopped treating its
// terms as valid at send time + TTL − margin on its own clock. The margin
// covers the difference in rate between the two clocks over one TTL. A
// holder's instance Lease changes holder only by that expiry, by its own
// Close (after its terms ended), or by a new incarnation of the same process
// (after the old one's terms ended); so "names another holder" or "absent"
// also means its terms are over. A restarted process whose predecessor (same
// instance name) still holds the instance Lease waits to see it unchanged
// for its duration too, and stops with DuplicateInstanceError if it is
// renewed meanwhile.
//
// What differs from the etcd backend, and the limits:
//   - No server-side expiry: a Lease never expires at the API server. Every
//     client judges from what it observed, so the argument rests on two
//     clients' monotonic clocks (holder's and candidate's) rather than on the
//     holder's and etcd's. Wall-clock renewTime is written for people and
//     client-go tools, never read.
//   - A crashed process is replaced after a peer has seen its instance
//     Lease unchanged for the TTL, unless its host proves it gone first:
//     leadership.Reclaim (systemd's ExecStopPost=) deletes its instance
//     Lease under a precondition that it still names that incarnation, and
//     a restarted process of the same instance on the same host takes over
//     its dead predecessor's at once. Proof needs the host, the PID and
//     its start time in one PID namespace, as on etcd.
//   - The API server stores Leases in its own etcd; compare-and-swap on
//     resourceVersion and reads without a resourceVersion are linearizable
//     there. An API server restart or an etcd election beneath it delays
//     renewals; a term ends at its deadline if they fail that long.
//   - Deregister marks the instance Lease leaving (annotation
//     jobs.snip.dev/leaving) instead of deleting it: deleting it would free
//     the jobs of terms that are still valid.
//   - The client must not be rate-limited on the client side (Config.Client):
//     the instance Lease's renewals share it with the campaigns' writes.
//   - Job and instance names must make valid Lease names and label values
//     (lower-case letters, digits, '-', '.').
//   - What leadership.Term does not guarantee holds here too: a paused
//     process can act after its term ended; only a resource that checks the
//     token (package fencing) refuses its writes.
package kubelease
