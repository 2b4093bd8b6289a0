// Package leadership gives each singleton job at most one *term* at a time across
// the processes that share an etcd cluster, and a new term soon after the old one
// can no longer act.
//
// A Session owns one etcd lease per process, shared by all of that process's
// elections, and keeps it alive on its own goroutine, over one long-lived
// LeaseKeepAlive stream with one request out at a time: nothing a job does can
// delay a keep-alive, and each answer counts from its own request's send time.
// A failed keep-alive is sent again at once on another member, then at a short
// pace until the deadline. Campaign creates <prefix>/leaders/<job> if absent, attached to that
// lease; the winner gets a Term. A Term carries:
//
//   - Token: the leader key's CreateRevision. etcd revisions are global and only
//     grow, so every later term of the job has a larger token. Resources that check
//     it (see package fencing) reject a writer whose token is lower than one they
//     have already seen.
//   - Deadline: the monotonic send time of the newest acknowledged keep-alive, plus
//     the granted TTL, minus the stop-early margin. etcd counts the lease's expiry
//     from when a keep-alive *arrives*, which is after it was sent, so the lease is
//     still alive at etcd when the deadline passes.
//   - Context: cancelled at the first of: deadline passed without renewal, the
//     leader key seen deleted or replaced, etcd reporting the lease gone, Resign,
//     Session.Close. Reason says which. A term never comes back to life; winning
//     again gives a new Term with a higher token.
//   - Valid: a cheap check (no I/O, no allocation) that the term has not ended and
//     its deadline is still ahead.
//
// What is guaranteed: while a term is Valid, no other term of the same job has
// been granted (etcd's create-if-absent and lease expiry give the mutual exclusion;
// the margin covers the gap between our clock and etcd's). Tokens of a job's terms
// strictly increase. A leader that crashes is replaced after its lease expires at
// etcd (TTL after its last keep-alive arrived, plus etcd's expiry scan, about
// 500 ms), or, when its host lives, as soon as a supervisor there has seen it
// exit and called Reclaim, which revokes the lease of a process proven gone by
// its PID and start time (never a running one's). Resign and Close hand over
// at once.
//
// What is NOT guaranteed: that a process stops acting the instant its term ends.
// A process can be paused (GC, SIGSTOP, a suspended VM) between checking Valid and
// doing the work, and wake after a successor has started. Only a resource that
// checks the fencing token can refuse such a stale write; resources that cannot
// (an ACME CA) need idempotent work and a lock-delay. The margin assumes that this
// host's monotonic clock and etcd's do not drift apart by more than the margin over
// one TTL; it does not assume synchronised wall clocks, which are never compared.
//
// The key layout is this package's alone: <prefix>/leaders/<job> (a term),
// <prefix>/instances/<name> (an instance's registration, on its lease) and
// <prefix>/resign/<job> (an operator's request that the term with the token
// it names resign). Other packages read and write them through this API
// (Observe, Leaders, Instances, WatchInstances, Session.ClusterLoad,
// RequestResign, Session.WatchResignRequests, Reclaim), never by key: the
// scheduler imports no etcd package.
//
// See docs/safety.md for the argument and the test that covers each step.
package leadership
