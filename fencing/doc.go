// Package fencing makes PostgreSQL refuse writes from a leader whose term has
// been superseded: the only complete answer to a leader that was paused (GC,
// SIGSTOP, a suspended VM) between checking its term and writing.
//
// Each write goes through Fence.Do with a resource name (what is written, e.g.
// "report:weekly") and the term's token (package leadership: the leader key's
// etcd CreateRevision, which grows with every term of a job). Do runs the
// caller's function in one transaction that first advances the row
// (resource → highest token seen) of table fencing_tokens (migrations
// 0001_fencing.sql), and only if the stored token is not higher:
//
//	INSERT ... ON CONFLICT (resource) DO UPDATE ... WHERE stored token <= token
//
// What is guaranteed: once a transaction fenced with token T has committed on a
// resource, no transaction fenced with a lower token commits on that resource:
// it gets a *StaleTokenError (errors.Is ErrStaleToken) before the caller's
// function runs, and nothing it did is kept. Writes with the stored token
// itself (the same term writing again) or a higher one go through, and a higher
// one advances the row. The upsert locks the resource's row until the
// transaction ends, so fenced writers of one resource run one after the other:
// a writer that arrives while another holds the row waits, then is checked
// against what the first committed. The caller's error, a panic, or a
// cancelled context rolls everything back, the token advance included.
//
// A writer kept waiting by an older term's open transaction (a leader cut
// off mid-transaction) need not wait for PostgreSQL or TCP to notice:
// WithStaleHolderBreak ends such a holder — only a fenced write with a lower
// token — after a delay, and WithIdleTimeout bounds any fenced transaction's
// idle time.
//
// Programs in any language fence with the SQL function snip_jobs_fence
// (migrations 0017_fence_function.sql): the same rule on the same table, so a
// Go writer and a program see each other's tokens. Do keeps its own statement
// rather than call it: the previous release writes with this statement during
// a rolling upgrade anyway, and the runtime role keeps its write on
// fencing_tokens for that release, so the function would add a dependency and
// take no right away; TestGoAndSQLWritersFollowOneRule holds the two to one
// rule, each side waiting for the other's row.
//
// What is NOT guaranteed: anything about writes that do not go through Do on
// the same resource name with the same database, or about effects outside the
// transaction (HTTP calls, files): those need idempotence or a lock-delay.
// The check is only as good as the tokens: they must come from one job's terms
// (one etcd key), so that a later term always has a higher token. A commit
// whose outcome is unknown (the connection broke during COMMIT) is reported as
// an error, although the write may have committed. Holding the row for the
// whole function serialises the resource's writers: keep the function short
// and do slow work (network calls) before Do. Transactions run at READ
// COMMITTED, which the check relies on: at a stricter level a waiting writer
// would get a serialization failure instead of a *StaleTokenError.
package fencing
