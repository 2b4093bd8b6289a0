package leadership

import (
	"context"
	"errors"
)

// Store is what a backend does for a Session: where leases and terms are
// kept (etcd: a lease and keys; Kubernetes: Lease objects). A Session drives
// it and owns everything the backends share (deadlines, terms, campaigns'
// bookkeeping, statistics); a Store only talks to its server.
type Store interface {
	// Config is the session's identity and timing, as the store validated
	// them with its own (WithDefaults and the store's rules for names).
	Config() Config
	// CheckJob reports a job name the store cannot keep a term of.
	CheckJob(job string) error
	// Open starts a new lease of this process and registers the instance on
	// it. It calls l.Start with the send time of the request that created
	// the lease and the TTL granted, before anything that can take long, and
	// cleans up after itself when it fails. An error that wraps
	// ErrDuplicateInstance stops the session.
	Open(ctx context.Context, l *Lease) (Held, error)
	// WatchInstances calls f with the names of the instances that are up,
	// sorted, at once and after each change, until ctx ends.
	WatchInstances(ctx context.Context, f func(names []string))
	// WatchResignRequests calls f for each operator's request that the term
	// of job with token resign (Cluster.RequestResign), until ctx ends.
	WatchResignRequests(ctx context.Context, f func(job string, token int64))
	// ClusterLoad counts the terms each instance that is up leads.
	ClusterLoad(ctx context.Context) (map[string]int, error)
}

// Held is one lease as its store holds it. The session calls KeepAlive and
// then Release on its own goroutine, once each; Contend and Deregister from
// any goroutine while the lease lives.
type Held interface {
	// ID names the lease for people and Stats: etcd's lease ID in hex, the
	// Kubernetes incarnation's holder identity.
	ID() string
	// KeepAlive renews the lease, reporting each acknowledged renewal with
	// Lease.Renewed, until the lease ends (its context is done: return its
	// cause) or ctx does (shutdown: return ReasonShutdown).
	KeepAlive(ctx context.Context) *EndedError
	// Release lets go of the lease after it ended with cause (revoke it,
	// delete the instance's record); best effort. ctx ends when the session
	// closes (already, at shutdown): a release that keeps trying stops then.
	Release(ctx context.Context, cause *EndedError)
	// Contend makes one attempt to win job on this lease. It returns the
	// claim when won; (nil, nil) when the caller should judge again (it
	// waited for the holder to go, or lost a race); an error when the store
	// did not answer (the caller retries after a pause). Its waits end
	// with ctx or the lease; a write that may win ends with the lease (or a
	// bound), not with ctx: its answer must not be lost while the store
	// commits it, and the session releases a win ctx no longer wants.
	Contend(ctx context.Context, job string) (Claim, error)
	// Deregister makes peers stop counting this instance as up while its
	// lease and terms live on (a process on its way out calls it first).
	Deregister(ctx context.Context) error
}

// Claim is a store's record of one won term.
type Claim interface {
	// Token is the term's fencing token: larger than every earlier term's of the job.
	Token() int64
	// Follow returns why the term is over as the store records it (its
	// record deleted or naming another term: ReasonKeyLost), or nil once ctx ends.
	Follow(ctx context.Context) *EndedError
	// Release deletes or releases the record if it is still this term's, so
	// that a waiting candidate wins at once: one attempt, bounded by ctx. An
	// error no second attempt can mend (the store refuses this account the
	// write) wraps ErrRefused.
	Release(ctx context.Context) error
}

// ErrDuplicateInstance is wrapped by Open's error when another live process
// uses this instance name: the session stops, as two processes with one name
// would take each other's leases.
var ErrDuplicateInstance = errors.New("leadership: another live process uses this instance name")

// ErrRefused marks a store's answer that trying again cannot change: the
// account lacks the permission (etcd's permission denied; Kubernetes'
// Forbidden, Unauthorized). Resign gives up at the first.
var ErrRefused = errors.New("leadership: the store refused the request (a permission the account lacks)")
