// Package etcdlease keeps package leadership's terms on etcd: the backend
// for deployments that run their own etcd (or one embedded member, for trying
// things out). NewSession returns a *leadership.Session on an etcd store;
// NewCluster what an operator's command reads and asks of etcd.
//
// One etcd lease per process, kept alive over one long-lived LeaseKeepAlive
// stream with one request out at a time: each answer counts from its own
// request's send time. A failed keep-alive is sent again at once on another
// member, then at a short pace until the deadline. A campaign creates
// <prefix>/leaders/<job> if absent, attached to the lease
// (Txn(If(CreateRevision(key) == 0))); the key's CreateRevision is the
// term's token: etcd revisions are global and only grow, so every later term
// of the job has a larger one. A waiting campaign watches the key for its
// deletion (and checks again every 3×TTL in case a watch event is lost). A
// term ends when its key is deleted or replaced (a watch), its lease is
// reported gone, or its deadline passes. Resign deletes the key if its
// CreateRevision is still the token; Close revokes the lease, and every key
// with it.
//
// The deadline: etcd resets a lease's expiry when a keep-alive *arrives*,
// after it was sent, and scans for expired leases every 500 ms, so the lease
// is alive at etcd until at least send time + TTL; the session stops at send
// time + TTL − margin on its own monotonic clock. The margin covers the drift
// between this host's clock and etcd's over one TTL. A new etcd leader
// extends every lease (never shortens it), so an etcd election ends terms
// only on this side, if keep-alives go unanswered for TTL − margin.
//
// Keys (package layout, which names them without a client):
// <prefix>/leaders/<job> (a term), <prefix>/instances/<name> (an instance's
// registration, on its lease: who is up, and the process — host, PID, start
// time — that death reclaim proves gone) and <prefix>/resign/<job> (an
// operator's request that the term with the token it names resign). A
// restarted process whose dead predecessor (same instance, same host) still
// holds a registration revokes that lease at start; a live one, or another
// host's, stops it with DuplicateInstanceError.
//
// Limits beyond package leadership's: the session needs read and write on
// the prefix, and a revoke needs write on every key attached to the lease,
// so every key the instance attaches stays under the prefix.
package etcdlease
