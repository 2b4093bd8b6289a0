// Package leadership gives each singleton job at most one *term* at a time across
// the processes that share a store, and a new term soon after the old one can no
// longer act. It is backend-neutral: a Store keeps the leases and the terms'
// records (package etcdlease on etcd, package kubelease on Kubernetes Leases),
// and everything else is here, written once.
//
// A Session owns one lease per process, shared by all of that process's
// elections, kept alive by its store on a goroutine of its own: nothing a job
// does can delay a renewal. Campaign asks the store to record this process as
// the job's holder on that lease; the winner gets a Term. A Term carries:
//
//   - Token: the fencing token, from the store: every later term of the job
//     has a larger one. Resources that check it (see package fencing) reject a
//     writer whose token is lower than one they have already seen.
//   - Deadline: the monotonic send time of the newest acknowledged renewal of
//     the lease (or of its grant), plus the granted TTL, minus the stop-early
//     margin. A store counts the lease's life from when a renewal *arrives*,
//     which is after it was sent, so the lease still lives there when the
//     deadline passes.
//   - Context: cancelled at the first of: deadline passed without renewal, the
//     store's record of the term seen deleted or replaced, the store reporting
//     the lease gone, Resign, Session.Close. Reason says which. A term never
//     comes back to life; winning again gives a new Term with a higher token.
//   - Valid: a cheap check (no I/O, no allocation) that the term has not ended and
//     its deadline is still ahead.
//
// What is guaranteed: while a term is Valid, no other term of the same job has
// been granted (the store's compare-and-swap and its lease expiry give the
// mutual exclusion; the margin covers the gap between this host's clock and
// the clock that judges expiry: etcd's, or a Kubernetes peer's). Tokens of a
// job's terms strictly increase. A leader that crashes is replaced once its
// lease ends, or, when its host lives, as soon as a supervisor there has seen
// it exit and called Reclaim, which ends the lease of a process proven gone
// by its PID and start time (never a running one's). Resign and Close hand
// over at once.
//
// What is NOT guaranteed: that a process stops acting the instant its term ends.
// A process can be paused (GC, SIGSTOP, a suspended VM) between checking Valid and
// doing the work, and wake after a successor has started. Only a resource that
// checks the fencing token can refuse such a stale write; resources that cannot
// (an ACME CA) need idempotent work and a lock-delay. The margin assumes that
// the clocks involved do not drift apart by more than the margin over one TTL;
// wall clocks are never compared.
//
// The conformance suite (leadership/internal/conformance) holds these
// promises against every backend, on its real server. docs/safety.md gives
// the argument and the test that covers each step; docs/architecture.md says
// where a new backend goes.
package leadership
