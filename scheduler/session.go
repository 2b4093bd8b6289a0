package scheduler

import (
	"context"

	"github.com/snip/snip-jobs/leadership"
)

// Session is what the scheduler needs of this process's leadership session:
// terms, the instances that are up and the terms they lead, operators'
// resign requests, and the lease's timing. *leadership.Session satisfies it;
// declaring it here lets the spread and lifecycle decisions be tested without
// etcd (the guarantees themselves are tested against real etcd).
type Session interface {
	// Config gives the lease's TTL and renew interval, which pace the
	// scheduler's own waits.
	Config() leadership.Config
	Campaign(ctx context.Context, job string, opts ...leadership.CampaignOption) (*leadership.Term, error)
	// Deregister removes this instance's registration before its terms are
	// resigned at shutdown, so that successors see it gone.
	Deregister(ctx context.Context) error
	WatchInstances(ctx context.Context, f func(names []string))
	WatchResignRequests(ctx context.Context, f func(job string, token int64))
	ClusterLoad(ctx context.Context) (map[string]int, error)
	// Stats is exported as the lease's metrics.
	Stats() leadership.Stats
}

var _ Session = (*leadership.Session)(nil)

// sessionOrNil turns a nil *leadership.Session into a nil Session, so that
// "no etcd" stays a nil check whichever way the caller spelled it.
func sessionOrNil(s Session) Session {
	if ls, ok := s.(*leadership.Session); ok && ls == nil {
		return nil
	}
	return s
}
