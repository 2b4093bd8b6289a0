package scheduler

import (
	"context"
	"time"

	"github.com/snip/snip-jobs/leadership"
)

// Term is what the scheduler needs of one term of one job, whichever backend
// granted it: the fencing token, a context that ends with the term, the cheap
// validity check a job's run gates its writes on, and a way to hand it over.
// *leadership.Term satisfies it, whichever backend's store granted it.
type Term interface {
	Job() string
	Token() int64
	// Lease names the lease the term hangs on, as its store does
	// (leadership.Registration.Lease): the records name it, so that a
	// reclaim of that lease can name its terms (RecordReclaimed).
	Lease() string
	Started() time.Time
	// Context ends when the term does; Reason then says why.
	Context() context.Context
	Valid() bool
	// Deadline is when the term stops being valid unless renewed first.
	Deadline() time.Time
	Reason() leadership.Reason
	Resign(ctx context.Context) error
}

// Session is what the scheduler needs of this process's leadership session:
// terms, the instances that are up and the terms they lead, operators'
// resign requests, and the lease's timing. Over adapts a
// *leadership.Session, of either backend, to it; declaring it here lets the
// spread and lifecycle decisions be tested without a store (the guarantees
// themselves are tested against real etcd and a real kube-apiserver).
type Session interface {
	// Config gives the lease's TTL and renew interval, which pace the
	// scheduler's own waits.
	Config() leadership.Config
	Campaign(ctx context.Context, job string, opts ...leadership.CampaignOption) (Term, error)
	// Deregister removes this instance's registration before its terms are
	// resigned at shutdown, so that successors see it gone.
	Deregister(ctx context.Context) error
	WatchInstances(ctx context.Context, f func(names []string))
	WatchResignRequests(ctx context.Context, f func(job string, token int64))
	ClusterLoad(ctx context.Context) (map[string]int, error)
	// Stats is exported as the lease's metrics.
	Stats() leadership.Stats
}

// Over makes a leadership session a Session (Go has no covariant results:
// a Campaign returning *leadership.Term is not one returning Term).
func Over(s *leadership.Session) Session { return over{s} }

type over struct{ *leadership.Session }

func (o over) Campaign(ctx context.Context, job string, opts ...leadership.CampaignOption) (Term, error) {
	t, err := o.Session.Campaign(ctx, job, opts...)
	if err != nil {
		return nil, err
	}
	return t, nil
}
