package scheduler

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// spread keeps this instance's share of the leader-mode singletons fair: it
// holds back campaigns while this instance leads its fair share and another
// live instance leads fewer, and hands a term over while it leads more than
// its share. Its decisions read the session's view of the cluster only.
type spread struct {
	session    Session
	instance   string
	singletons int // leader-mode singletons configured here
	holdbacks  *prometheus.CounterVec

	leading   atomic.Int64 // terms this instance holds now
	instances atomic.Int64 // live instances, from the watch on their registrations
}

func newSpread(session Session, instance string, holdbacks *prometheus.CounterVec) *spread {
	sp := &spread{session: session, instance: instance, holdbacks: holdbacks}
	sp.instances.Store(1)
	return sp
}

// holdback is how long the job's next campaign attempt waits: while the job is
// on hold after a voluntary hand-over, or while this instance leads at least
// its fair share and another live instance leads fewer (that one should win).
// It reads the cluster's load fresh from etcd, so a job freed by a crash or a
// shutdown is taken at once by instances that are all equally loaded.
func (sp *spread) holdback(j *job) time.Duration {
	j.mu.Lock()
	hold := time.Until(j.holdUntil)
	j.mu.Unlock()
	if hold > 0 {
		return hold
	}
	mine := sp.leading.Load()
	if mine == 0 {
		return 0
	}
	load, err := sp.clusterLoad()
	if err != nil || mine < fairShare(sp.singletons, len(load)) {
		return 0
	}
	for name, n := range load {
		if name != sp.instance && int64(n) < mine {
			sp.holdbacks.WithLabelValues(j.spec.Name).Inc()
			return sp.delay()
		}
	}
	return 0
}

// clusterLoad counts the terms each live (registered) instance leads, from
// etcd, bounded by a renew interval: it sits on the path of every hand-over.
func (sp *spread) clusterLoad() (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sp.session.Config().RenewInterval)
	defer cancel()
	return sp.session.ClusterLoad(ctx)
}

func (sp *spread) fairShare() int64 {
	return fairShare(sp.singletons, int(sp.instances.Load()))
}

// fairShare is ceil(singletons / instances).
func fairShare(singletons, instances int) int64 {
	n := int64(max(instances, 1))
	return (int64(singletons) + n - 1) / n
}

// overloaded reports whether this instance leads more than its fair share
// while others are up: then it hands one term over.
func (sp *spread) overloaded() bool {
	return sp.instances.Load() > 1 && sp.leading.Load() > sp.fairShare()
}

// delay gives instances with fewer terms time to win first: far longer
// than an etcd round trip, far shorter than a TTL.
func (sp *spread) delay() time.Duration {
	return max(500*time.Millisecond, sp.session.Config().RenewInterval/2)
}

// loop keeps the count of live instances (for fairShare) from a watch on
// their registrations, asking etcd nothing while nobody comes or goes, and
// every few seconds, when this instance is overloaded, hands one term over.
func (sp *spread) loop(ctx context.Context, jobs []*job) {
	every := max(time.Second, sp.session.Config().RenewInterval)
	go sp.session.WatchInstances(ctx, func(names []string) {
		if len(names) > 0 {
			sp.instances.Store(int64(len(names)))
		}
	})
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if sp.overloaded() {
			sp.handOverOne(jobs)
		}
	}
}

// handOverOne ends the lead of one job this instance holds, to be taken by an
// instance that leads fewer.
func (sp *spread) handOverOne(jobs []*job) {
	for _, j := range jobs {
		j.mu.Lock()
		stop, term := j.stop, j.term
		j.mu.Unlock()
		if stop != nil && term != nil {
			j.log.Info("leading more than a fair share; handing this job over",
				"token", term.Token(), "leading", sp.leading.Load(), "fair_share", sp.fairShare(), "instances", sp.instances.Load())
			stop(errRebalance)
			return
		}
	}
}
