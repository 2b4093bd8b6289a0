package scheduler

import (
	"context"
	"time"
)

// spreadLoop keeps the count of live instances (for fairShare) from a watch
// on their registrations, asking etcd nothing while nobody comes or goes, and
// every few seconds, when this instance leads more than its fair share while
// others are up, hands one term over.
func (s *Scheduler) spreadLoop(ctx context.Context) {
	every := max(time.Second, s.cfg.Session.Config().RenewInterval)
	go s.cfg.Session.WatchInstances(ctx, func(names []string) {
		if len(names) > 0 {
			s.instances.Store(int64(len(names)))
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
		if s.instances.Load() > 1 && s.leading.Load() > s.fairShare() {
			s.handOverOne()
		}
	}
}

// handOverOne ends the lead of one job this instance holds, to be taken by an
// instance that leads fewer.
func (s *Scheduler) handOverOne() {
	for _, j := range s.jobs {
		j.mu.Lock()
		stop, term := j.stop, j.term
		j.mu.Unlock()
		if stop != nil && term != nil {
			j.log.Info("leading more than a fair share; handing this job over",
				"token", term.Token(), "leading", s.leading.Load(), "fair_share", s.fairShare(), "instances", s.instances.Load())
			stop(errRebalance)
			return
		}
	}
}

// resignRequested ends the lead of job name if its current token is the one
// an operator asked to resign (leadership.RequestResign).
func (s *Scheduler) resignRequested(name string, token int64) {
	for _, j := range s.jobs {
		if j.spec.Name != name {
			continue
		}
		j.mu.Lock()
		stop, term := j.stop, j.term
		j.mu.Unlock()
		if stop != nil && term != nil && term.Token() == token {
			j.log.Info("resign requested by an operator", "token", token)
			stop(errResignRequested)
		}
	}
}
