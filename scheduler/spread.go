package scheduler

import (
	"context"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
)

// spreadLoop keeps the count of live instances (for fairShare) from a watch
// on their registrations, asking etcd nothing while nobody comes or goes, and
// every few seconds, when this instance leads more than its fair share while
// others are up, hands one term over.
func (s *Scheduler) spreadLoop(ctx context.Context) {
	cfg := s.cfg.Session.Config()
	every := max(time.Second, cfg.RenewInterval)
	go leadership.WatchInstances(ctx, cfg.Client, cfg.Prefix, every, func(names []string) {
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

// watchResignRequests ends the lead of a job whose current token an operator
// asked to resign (RequestResign).
func (s *Scheduler) watchResignRequests(ctx context.Context) {
	cfg := s.cfg.Session.Config()
	pfx := ResignKey(cfg.Prefix, "")
	for ctx.Err() == nil {
		for resp := range cfg.Client.Watch(ctx, pfx, clientv3.WithPrefix()) {
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				name := strings.TrimPrefix(string(ev.Kv.Key), pfx)
				token, err := strconv.ParseInt(string(ev.Kv.Value), 10, 64)
				if err != nil {
					s.log.Warn("ignoring an unreadable resign request", "job", name, "value", string(ev.Kv.Value))
					continue
				}
				s.resignRequested(name, token)
			}
		}
		pause(ctx, time.Second)
	}
}

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
