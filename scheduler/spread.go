package scheduler

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// spread keeps the leader-mode singletons spread over the live instances so
// that no instance leads two more than another (max − min ≤ 1): it holds back
// campaigns while this instance leads more than another live instance, and
// hands a term over while it leads at least two more than the least loaded
// one. Its decisions read the session's view of the cluster only
// (ClusterLoad, WatchInstances), the same on every backend.
type spread struct {
	session    Session
	instance   string
	singletons int // leader-mode singletons configured here
	holdbacks  *prometheus.CounterVec
	gate       *gate         // the operators' controls: drained instances and paused jobs
	resignHold time.Duration // a resigned job stays off its instance, and where it went, this long

	leading   atomic.Int64 // terms this instance holds now
	instances atomic.Int64 // live instances, from the watch on their registrations
	members   atomic.Int64 // changes of the set of live instances seen by that watch

	// The hand-over loop's own state (its goroutine only).
	seen     int64     // members when last looked at
	stopping *job      // the job last handed over, until its lead has ended
	token    int64     // that lead's token
	last     *handOver // the last hand-over, until judged
	quiet    time.Time // no hand-over before: the last one was futile
	quietFor time.Duration
}

// handOver is what a hand-over expected: one of the least loaded instances,
// leading least then, to take the job.
type handOver struct {
	job    *job
	least  int
	takers []string
}

func newSpread(session Session, instance string, holdbacks *prometheus.CounterVec) *spread {
	sp := &spread{session: session, instance: instance, holdbacks: holdbacks, resignHold: DefaultResignHold}
	sp.instances.Store(1)
	return sp
}

// holdback is how long the job's next campaign attempt waits: while the job is
// on hold after a voluntary hand-over, or while this instance leads more than
// another live instance (that one should win), or — within an operator's
// resign of it here — for as long as other instances need to win it first.
// It reads the cluster's load fresh, so a job freed by a crash or a shutdown
// is taken at once by instances that are all equally loaded.
func (sp *spread) holdback(j *job) time.Duration {
	j.mu.Lock()
	hold := time.Until(j.holdUntil)
	j.mu.Unlock()
	if _, here := j.resignHeld(sp.resignHold); here {
		sp.holdbacks.WithLabelValues(j.spec.Name).Inc()
		return max(hold, sp.afterResign(j))
	}
	if hold > 0 {
		return hold
	}
	mine := sp.leading.Load()
	if mine == 0 {
		return 0
	}
	load, err := sp.clusterLoad()
	if err != nil {
		return 0
	}
	// A win the store has recorded but the lifecycle not yet counted.
	mine = max(mine, int64(load[sp.instance]))
	for name, n := range load {
		if name != sp.instance && int64(n) < mine {
			sp.holdbacks.WithLabelValues(j.spec.Name).Inc()
			return sp.delay()
		}
	}
	return 0
}

// afterResign is how long an instance an operator resigned job j from waits
// before it campaigns for j again: while another live instance may take it,
// until a TTL has passed since the resign (the others wait for nothing, so on
// a loaded machine they need more than a moment), else briefly.
func (sp *spread) afterResign(j *job) time.Duration {
	wait := 2 * sp.delay()
	load, err := sp.clusterLoad()
	if err != nil || len(load) < 2 {
		return wait
	}
	j.mu.Lock()
	since := time.Since(j.resigned)
	j.mu.Unlock()
	return max(wait, sp.session.Config().TTL-since)
}

// clusterLoad counts the terms each live (registered) instance leads, from
// the store, bounded by a renew interval: it sits on the path of every
// hand-over. Drained instances are left out: they are no candidates.
func (sp *spread) clusterLoad() (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sp.session.Config().RenewInterval)
	defer cancel()
	load, err := sp.session.ClusterLoad(ctx)
	if err != nil || sp.gate == nil {
		return load, err
	}
	return sp.gate.undrained(load), nil
}

// settled reports whether every singleton configured here has a live leader
// in load: otherwise a job is between two terms, and the load is about to
// change.
func settled(load map[string]int, singletons int) bool {
	sum := 0
	for _, n := range load {
		sum += n
	}
	return sum >= singletons
}

// handOverTo decides, from one reading of the cluster's load, whether self
// hands one of its terms over; target is the least loaded other instance
// (the first by name among equals), which should win it. Self hands over
// when
//   - it is live, and at least one other instance is;
//   - the load is settled: no job between two terms;
//   - it leads at least two more than the least loaded live instance; and
//   - it is the first of the most loaded (by name among equals), so that of
//     instances reading the same load, one hands over.
func handOverTo(self string, load map[string]int, singletons int) (target string, ok bool) {
	mine, live := load[self]
	if !live || len(load) < 2 || !settled(load, singletons) {
		return "", false
	}
	least := -1
	for name, n := range load {
		if name == self {
			continue
		}
		if n > mine || n == mine && name < self {
			return "", false // another instance is first of the most loaded
		}
		if least < 0 || n < least || n == least && name < target {
			target, least = name, n
		}
	}
	return target, mine >= least+2
}

// delay gives instances with fewer terms time to win first: far longer
// than a store's round trip, far shorter than a TTL.
func (sp *spread) delay() time.Duration {
	return max(500*time.Millisecond, sp.session.Config().RenewInterval/2)
}

// period is the pace of hand-overs: at most one per period.
func (sp *spread) period() time.Duration {
	return max(time.Second, sp.session.Config().RenewInterval)
}

// loop keeps the count of live instances from a watch on their registrations
// and, every period, hands one term over if this instance leads at least two
// more than the least loaded live instance.
func (sp *spread) loop(ctx context.Context, jobs []*job) {
	var last []string
	go sp.session.WatchInstances(ctx, func(names []string) {
		if len(names) > 0 {
			sp.instances.Store(int64(len(names)))
		}
		if !slices.Equal(names, last) {
			last = slices.Clone(names)
			sp.members.Add(1)
		}
	})
	t := time.NewTicker(sp.period())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sp.rebalance(jobs)
	}
}

// rebalance is one period's decision. It reads the load only when this
// instance could hand over (it leads two or more, and others are up) or has a
// hand-over to judge: a cluster at one term per instance asks the store
// nothing.
func (sp *spread) rebalance(jobs []*job) {
	if m := sp.members.Load(); m != sp.seen {
		// Someone came or went: what was futile may not be any more.
		sp.seen, sp.last, sp.quiet, sp.quietFor = m, nil, time.Time{}, 0
	}
	if sp.handingOver() {
		return
	}
	if sp.last == nil && (sp.instances.Load() < 2 || sp.leading.Load() < 2) {
		return
	}
	load, err := sp.clusterLoad()
	singletons := sp.singletons
	if sp.gate != nil {
		singletons -= sp.gate.pausedSingletons(jobs) // nobody leads a paused job
	}
	if err != nil || !settled(load, singletons) {
		return
	}
	sp.judge(load)
	if time.Now().Before(sp.quiet) {
		return
	}
	target, ok := handOverTo(sp.instance, load, singletons)
	if !ok {
		return
	}
	if j := sp.handOverOne(jobs, load, target); j != nil {
		sp.last = &handOver{job: j, least: load[target]}
		for name, n := range load {
			if n == load[target] {
				sp.last.takers = append(sp.last.takers, name)
			}
		}
	}
}

// handingOver reports whether the lead last handed over is still ending (its
// job stopping within its grace, or resigning): one hand-over at a time.
func (sp *spread) handingOver() bool {
	if sp.stopping == nil {
		return false
	}
	sp.stopping.mu.Lock()
	term := sp.stopping.term
	sp.stopping.mu.Unlock()
	if term != nil && term.Token() == sp.token {
		return true
	}
	sp.stopping = nil
	return false
}

// judge looks, once the load has settled after a hand-over, whether one of
// the least loaded instances took the job. If each still leads no more than
// before, none did (they run none of these singletons, or were too slow):
// the job went to an instance no less loaded, and handing over again would
// only move jobs between the others. Hand-overs then pause, four periods,
// doubling up to 64, until one succeeds or an instance comes or goes.
func (sp *spread) judge(load map[string]int) {
	last := sp.last
	if last == nil {
		return
	}
	sp.last = nil
	for _, name := range last.takers {
		if n, live := load[name]; !live || n > last.least {
			sp.quiet, sp.quietFor = time.Time{}, 0
			return
		}
	}
	sp.quietFor = min(max(2*sp.quietFor, 4*sp.period()), 64*sp.period())
	sp.quiet = time.Now().Add(sp.quietFor)
	last.job.log.Warn("no least loaded instance took this job when it was handed over; pausing hand-overs",
		"least_loaded", last.takers, "their_load", last.least, "pause", sp.quietFor)
}

// handOverOne ends the lead of one job this instance holds, to be taken by the
// least loaded instance, and returns that job (nil: it leads none it may hand
// over). A job an operator resigned within the resign hold stays: the spread
// rule does not undo a resign.
func (sp *spread) handOverOne(jobs []*job, load map[string]int, target string) *job {
	for _, j := range jobs {
		if held, _ := j.resignHeld(sp.resignHold); held {
			continue
		}
		j.mu.Lock()
		stop, term := j.stop, j.term
		j.mu.Unlock()
		if stop != nil && term != nil {
			j.log.Info("leading two more than the least loaded instance; handing this job over",
				"token", term.Token(), "leading", load[sp.instance], "least_loaded", target, "its_load", load[target], "instances", len(load))
			sp.stopping, sp.token = j, term.Token()
			stop(errRebalance)
			return j
		}
	}
	return nil
}
