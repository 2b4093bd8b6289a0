package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/notify"
	"github.com/snip/snip-jobs/leadership"
)

// loadSession is a Session whose cluster load is given: the spread decision
// is arithmetic over it, so it needs no etcd here. (That instances settle and
// take over without holding back is shown against real etcd in
// TestSpreadSettlesAtTwoEach, TestSpreadGivesALateInstanceItsShare and
// TestEquallyLoadedInstancesTakeOverWithoutHoldingBack.)
type loadSession struct {
	Session // the methods the decision does not call: nil, panic if called
	load    map[string]int
	err     error
	reads   int
}

func (f *loadSession) Config() leadership.Config {
	return leadership.Config{RenewInterval: 2 * time.Second}
}

func (f *loadSession) ClusterLoad(context.Context) (map[string]int, error) {
	f.reads++
	return f.load, f.err
}

// An instance holds back a campaign only while another live instance leads
// fewer (that one should win the job); equally loaded instances, and one
// leading nothing, campaign at once.
func TestSpreadHoldsBackOnlyAnInstanceAheadOfAnother(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		leading int64
		load    map[string]int
		err     error
		hold    bool
	}{
		{"leads nothing", 0, map[string]int{"a": 0, "b": 5}, nil, false},
		{"all equal", 2, map[string]int{"a": 2, "b": 2, "c": 2}, nil, false},
		{"another leads fewer", 2, map[string]int{"a": 2, "b": 1, "c": 3}, nil, true},
		{"one ahead of another", 1, map[string]int{"a": 1, "b": 0, "c": 5}, nil, true},
		{"a win not counted yet", 1, map[string]int{"a": 2, "b": 1, "c": 1}, nil, true},
		{"the least loaded", 1, map[string]int{"a": 1, "b": 1, "c": 2}, nil, false},
		{"alone", 6, map[string]int{"a": 6}, nil, false},
		{"load unknown", 3, nil, errors.New("etcd unreachable"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sess := &loadSession{load: tc.load, err: tc.err}
			holdbacks := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "h"}, []string{"job"})
			sp := newSpread(sess, "a", holdbacks)
			sp.singletons = 6
			sp.leading.Store(tc.leading)
			j := &job{spec: configs.Job{Name: "job-0"}}

			got := sp.holdback(j)
			want := time.Duration(0)
			if tc.hold {
				want = time.Second // half the renew interval, above the 500 ms floor
			}
			if got != want {
				t.Errorf("holdback %v, want %v", got, want)
			}
			if n := testutil.ToFloat64(holdbacks.WithLabelValues("job-0")); n != map[bool]float64{true: 1}[tc.hold] {
				t.Errorf("%v holdbacks counted, want %v", n, map[bool]float64{true: 1}[tc.hold])
			}
			if tc.leading == 0 && sess.reads != 0 {
				t.Errorf("an instance leading nothing read the cluster's load %d times: it campaigns at once", sess.reads)
			}
		})
	}
}

// A job handed over by choice stays on hold whatever the load, so that
// another instance wins it first, and only until its hold runs out. Under
// testing/synctest's clock.
func TestSpreadKeepsAHandedOverJobOnHoldUntilItRunsOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sp := newSpread(&loadSession{load: map[string]int{"a": 0, "b": 0}}, "a", prometheus.NewCounterVec(prometheus.CounterOpts{Name: "h"}, []string{"job"}))
		sp.singletons = 6
		j := &job{spec: configs.Job{Name: "job-0"}, holdUntil: time.Now().Add(time.Hour)}
		if got := sp.holdback(j); got != time.Hour {
			t.Errorf("holdback %v, want the hour on hold", got)
		}
		time.Sleep(59 * time.Minute)
		if got := sp.holdback(j); got != time.Minute {
			t.Errorf("holdback %v after 59 minutes, want the minute left", got)
		}
		time.Sleep(time.Minute)
		if got := sp.holdback(j); got != 0 {
			t.Errorf("holdback %v once the hold ran out, want 0: the instance leads nothing", got)
		}
	})
}

// An instance hands a term over only when it leads at least two more than the
// least loaded live instance, the load is settled (every singleton has a live
// leader) and it is the first of the most loaded: of the instances reading
// the same load, one hands over, to the least loaded.
func TestSpreadHandsOverOnlyTwoAheadOfTheLeastLoaded(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		singletons    int
		load          map[string]int
		giver, target string // "": nobody hands over
	}{
		{"2/2/0: the first of the two", 4, map[string]int{"a": 2, "b": 2, "c": 0}, "a", "c"},
		{"2/1/1", 4, map[string]int{"a": 2, "b": 1, "c": 1}, "", ""},
		{"2/2/1", 5, map[string]int{"a": 2, "b": 2, "c": 1}, "", ""},
		{"1/1/1", 3, map[string]int{"a": 1, "b": 1, "c": 1}, "", ""},
		{"a newcomer at 0 beside 1/1", 2, map[string]int{"a": 1, "b": 1, "c": 0}, "", ""},
		{"3/0/0", 3, map[string]int{"a": 3, "b": 0, "c": 0}, "a", "b"},
		{"2/1/0", 3, map[string]int{"a": 2, "b": 1, "c": 0}, "a", "c"},
		{"3/2/0: the most loaded only", 5, map[string]int{"a": 2, "b": 3, "c": 0}, "b", "c"},
		{"3/3/0: the first by name", 6, map[string]int{"b": 3, "c": 3, "a": 0}, "b", "a"},
		{"4/3/3/2", 12, map[string]int{"a": 3, "b": 4, "c": 3, "d": 2}, "b", "d"},
		{"a job between two terms", 4, map[string]int{"a": 1, "b": 2, "c": 0}, "", ""},
		{"more jobs than configured here", 3, map[string]int{"a": 3, "b": 1}, "a", "b"},
		{"6/0", 6, map[string]int{"a": 6, "b": 0}, "a", "b"},
		{"alone", 4, map[string]int{"a": 4}, "", ""},
	}
	for _, tc := range cases {
		for _, self := range append(slices.Sorted(maps.Keys(tc.load)), "gone") {
			target, ok := handOverTo(self, tc.load, tc.singletons)
			if ok != (self == tc.giver) || ok && target != tc.target {
				t.Errorf("%s, as %s: hand over %v to %q; want %v to %q", tc.name, self, ok, target, self == tc.giver, tc.target)
			}
		}
	}
}

// A hand-over is judged wasted only when none of the instances that were
// least loaded leads more once the load has settled: then hand-overs pause,
// four periods, doubling up to 64; one taken ends the pause.
func TestSpreadJudgesAHandOverByTheLeastLoaded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sp := newSpread(&loadSession{}, "a", nil)
		period := sp.period()
		j := &job{spec: configs.Job{Name: "job-0"}, log: slog.New(slog.DiscardHandler)}
		judge := func(load map[string]int) time.Duration {
			sp.last = &handOver{job: j, least: 0, takers: []string{"b", "c"}}
			sp.judge(load)
			return max(0, time.Until(sp.quiet))
		}
		if got := judge(map[string]int{"a": 1, "b": 0, "c": 1}); got != 0 {
			t.Errorf("c, one of the least loaded, took it: paused %v, want 0", got)
		}
		for _, want := range []int{4, 8, 16, 32, 64, 64} {
			if got := judge(map[string]int{"a": 1, "b": 0, "c": 0, "d": 3}); got != time.Duration(want)*period {
				t.Errorf("nobody least loaded took it: paused %v, want %d periods", got, want)
			}
		}
		if got := judge(map[string]int{"a": 1, "c": 0, "d": 3}); got != 0 || sp.quietFor != 0 {
			t.Errorf("b is gone: paused %v (next %v), want no pause", got, sp.quietFor)
		}
	})
}

// sim is a fake store for the spreads of several instances, under
// testing/synctest's clock: which instance holds each job, which are live.
// Each instance runs the real spread (its holdback before every campaign
// attempt, its hand-over loop) beside a stand-in for the lifecycle: campaign,
// lead until stopped, resign, hold a handed-over job back.
type sim struct {
	jobs int
	// stopping is how long a lead takes to end (its job returning within
	// its grace) before it resigns.
	stopping time.Duration

	mu        sync.Mutex
	holder    map[string]string // job → instance; absent: no leader
	live      map[string]*simInstance
	token     int64
	handOvers []simHandOver
	wins      []simWin

	freed   notify.Notifier // a job lost its leader
	members notify.Notifier // an instance came or went
}

type simHandOver struct {
	from string
	at   time.Time
}

type simInstance struct {
	sp   *spread
	stop context.CancelFunc
	jobs []*job
}

// simWin is a job won by an instance, at a time.
type simWin struct {
	job, instance string
	at            time.Time
}

// tokenTerm is a Term that only knows its token (what the hand-over reads).
type tokenTerm struct {
	Term
	token int64
}

func (t tokenTerm) Token() int64 { return t.token }

// simSession is an instance's view of the sim.
type simSession struct {
	Session // the methods spread does not call: nil, panic if called
	s       *sim
}

func (ss simSession) Config() leadership.Config {
	return leadership.Config{RenewInterval: 2 * time.Second}
}

func (ss simSession) ClusterLoad(context.Context) (map[string]int, error) { return ss.s.load(), nil }

func (ss simSession) WatchInstances(ctx context.Context, f func(names []string)) {
	for {
		changed := ss.s.members.Wait()
		ss.s.mu.Lock()
		names := slices.Sorted(maps.Keys(ss.s.live))
		ss.s.mu.Unlock()
		f(names)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

const simPeriod = 2 * time.Second // simSession's renew interval

func newSim(t *testing.T, jobs int) *sim {
	s := &sim{jobs: jobs, holder: map[string]string{}, live: map[string]*simInstance{}}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, in := range s.live {
			in.stop()
		}
	})
	return s
}

// start makes an instance live; one that does not campaign runs none of the
// singletons (another config) and leads nothing.
func (s *sim) start(name string, campaigns bool) {
	ctx, cancel := context.WithCancel(context.Background())
	sp := newSpread(simSession{s: s}, name, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "h"}, []string{"job"}))
	s.mu.Lock()
	s.live[name] = &simInstance{sp: sp, stop: cancel}
	s.mu.Unlock()
	s.members.Notify()
	if !campaigns {
		return
	}
	var jobs []*job
	for i := range s.jobs {
		jobs = append(jobs, &job{spec: configs.Job{Name: fmt.Sprint("job-", i)}, log: slog.New(slog.DiscardHandler), changed: new(notify.Notifier)})
	}
	sp.singletons = len(jobs)
	s.mu.Lock()
	s.live[name].jobs = jobs
	s.mu.Unlock()
	for _, j := range jobs {
		go s.lifecycle(ctx, name, sp, j)
	}
	go sp.loop(ctx, jobs)
}

// leave ends an instance's lease: its registration and terms go at once (an
// expiry, or a reclaim after a kill), then its goroutines stop.
func (s *sim) leave(name string) {
	s.mu.Lock()
	in := s.live[name]
	delete(s.live, name)
	for job, h := range s.holder {
		if h == name {
			delete(s.holder, job)
		}
	}
	s.mu.Unlock()
	s.members.Notify()
	s.freed.Notify()
	in.stop()
}

// lifecycle is lifecycle.loop's stand-in: campaign (the spread's holdback
// before each attempt), lead until stopped, stop the job, resign, and hold
// back a job handed over.
func (s *sim) lifecycle(ctx context.Context, name string, sp *spread, j *job) {
	for {
		token, ok := s.campaign(ctx, name, sp, j)
		if !ok {
			return
		}
		lead, stop := context.WithCancelCause(ctx)
		sp.leading.Add(1)
		j.update(func() { j.term, j.stop = tokenTerm{token: token}, stop })
		<-lead.Done()
		cause := context.Cause(lead)
		if ctx.Err() == nil {
			time.Sleep(s.stopping)
		}
		s.resign(name, j.spec.Name, errors.Is(cause, errRebalance))
		sp.leading.Add(-1)
		j.update(func() { j.term, j.stop = nil, nil })
		if handedOver(cause) {
			j.mu.Lock()
			j.holdUntil = time.Now().Add(2 * sp.delay())
			j.mu.Unlock()
		}
	}
}

func (s *sim) campaign(ctx context.Context, name string, sp *spread, j *job) (int64, bool) {
	for ctx.Err() == nil {
		if d := sp.holdback(j); d > 0 {
			select {
			case <-ctx.Done():
				return 0, false
			case <-time.After(d):
			}
		}
		freed := s.freed.Wait()
		s.mu.Lock()
		_, held := s.holder[j.spec.Name]
		_, live := s.live[name]
		if live && !held {
			s.token++
			token := s.token
			s.holder[j.spec.Name] = name
			s.wins = append(s.wins, simWin{job: j.spec.Name, instance: name, at: time.Now()})
			s.mu.Unlock()
			return token, true
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return 0, false
		case <-freed:
		}
	}
	return 0, false
}

// requestResign is an operator's resign of job (snip-jobs resign): every
// live instance's watch sees the request for its leader's token.
func (s *sim) requestResign(name string) {
	s.mu.Lock()
	var token int64
	for _, j := range s.live[s.holder[name]].jobs {
		if j.spec.Name == name {
			j.mu.Lock()
			token = j.term.Token()
			j.mu.Unlock()
		}
	}
	var all [][]*job
	for _, in := range s.live {
		all = append(all, in.jobs)
	}
	s.mu.Unlock()
	for _, jobs := range all {
		resignRequested(jobs, name, token)
	}
}

// resign deletes the job's record if it is still the instance's.
func (s *sim) resign(name, job string, rebalance bool) {
	s.mu.Lock()
	if s.holder[job] == name {
		delete(s.holder, job)
		if rebalance {
			s.handOvers = append(s.handOvers, simHandOver{from: name, at: time.Now()})
		}
	}
	s.mu.Unlock()
	s.freed.Notify()
}

func (s *sim) load() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	load := map[string]int{}
	for name := range s.live {
		load[name] = 0
	}
	for _, h := range s.holder {
		if _, live := s.live[h]; live {
			load[h]++
		}
	}
	return load
}

func (s *sim) moves() []simHandOver {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.handOvers)
}

// settle lets d of fake time pass and everything run that can.
func settle(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// loads is the sorted load of the live instances, highest first: "2/1/1".
func (s *sim) loads() string {
	var ns []string
	for _, n := range slices.Backward(slices.Sorted(maps.Values(s.load()))) {
		ns = append(ns, fmt.Sprint(n))
	}
	return strings.Join(ns, "/")
}

// An instance that starts after the others took every singleton gets its
// share: 4 singletons on 3 instances at 2/2/0 become 2/1/1 by one hand-over,
// and then nothing moves for an hour. The two instances at 2 tick at the same
// instant (started together), and a lead takes most of a period to end: both
// read the same load, with nothing in flight, and one hands over.
func TestSpreadGivesAReturningInstanceItsShareByOneHandOver(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 4)
		s.stopping = simPeriod * 3 / 4
		s.start("a", true)
		s.start("b", true)
		settle(time.Minute)
		if got := s.loads(); got != "2/2" {
			t.Fatalf("two instances lead %s, want 2/2", got)
		}
		before := len(s.moves())
		s.start("c", true)
		settle(time.Minute)
		if got, moves := s.loads(), s.moves()[before:]; got != "2/1/1" || len(moves) != 1 {
			t.Fatalf("after c started: %s by %d hand-overs (%v), want 2/1/1 by one", got, len(moves), moves)
		}
		settle(time.Hour)
		if got, moves := s.loads(), s.moves()[before:]; got != "2/1/1" || len(moves) != 1 {
			t.Fatalf("an hour later: %s, %d hand-overs since c started; want 2/1/1, nothing moved", got, len(moves))
		}
	})
}

// Loads with no instance two ahead of another are settled: nothing moves, a
// newcomer at 0 beside 1/1 included.
func TestSpreadMovesNothingWhereNoInstanceLeadsTwoMore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		jobs  int
		loads string
	}{{5, "2/2/1"}, {3, "1/1/1"}, {2, "1/1/0"}, {4, "2/1/1"}} {
		t.Run(tc.loads, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t, tc.jobs)
				// One at a time, each settling first: the load each sees
				// is the one before it joined.
				for _, name := range []string{"a", "b", "c"} {
					s.start(name, true)
					settle(time.Minute)
				}
				if got := s.loads(); got != tc.loads {
					t.Fatalf("%d jobs on three instances: %s, want %s", tc.jobs, got, tc.loads)
				}
				before := len(s.moves())
				settle(time.Hour)
				if got, moves := s.loads(), len(s.moves())-before; got != tc.loads || moves != 0 {
					t.Fatalf("an hour later: %s by %d hand-overs, want %s by none", got, moves, tc.loads)
				}
			})
		})
	}
}

// 3/0/0 becomes 1/1/1 by two hand-overs, one job at a time, each to an
// instance leading none. A lead takes most of a period to end: the second
// hand-over comes a period after the first has ended, not while it is still
// ending (nor is the first then judged wasted, which would pause the second
// by four periods).
func TestSpreadMovesOneJobAtATimeFromThreeZeroZero(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 3)
		s.stopping = simPeriod * 3 / 2
		s.start("a", true)
		settle(time.Minute)
		s.start("b", true)
		s.start("c", true)
		settle(time.Minute)
		moves := s.moves()
		if got := s.loads(); got != "1/1/1" || len(moves) != 2 {
			t.Fatalf("%s by %d hand-overs, want 1/1/1 by two", got, len(moves))
		}
		// Ended at most a period apart, plus the time the second takes to end.
		if gap := moves[1].at.Sub(moves[0].at); moves[0].from != "a" || moves[1].from != "a" || gap < s.stopping || gap > simPeriod+s.stopping {
			t.Errorf("hand-overs %v, %v apart: want both from a, ending %v to %v apart", moves, gap, s.stopping, simPeriod+s.stopping)
		}
		settle(time.Hour)
		if n := len(s.moves()); n != 2 {
			t.Errorf("%d hand-overs an hour later, want the same two", n)
		}
	})
}

// Instances come and go: each time the load settles with no instance two
// ahead of another, by no more hand-overs than needed, and stays there.
func TestSpreadSettlesAsInstancesComeAndGo(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 4)
		s.stopping = 300 * time.Millisecond
		step := func(what string, change func(), loads string, most int) {
			t.Helper()
			before := len(s.moves())
			change()
			settle(time.Minute)
			if got, moves := s.loads(), len(s.moves())-before; got != loads || moves > most {
				t.Fatalf("%s: %s by %d hand-overs, want %s by %d at most", what, got, moves, loads, most)
			}
			settle(time.Hour)
			if got, moves := s.loads(), len(s.moves())-before; got != loads || moves > most {
				t.Fatalf("%s, an hour later: %s by %d hand-overs, want %s by %d at most", what, got, moves, loads, most)
			}
		}
		step("a alone", func() { s.start("a", true) }, "4", 0)
		step("b joins", func() { s.start("b", true) }, "2/2", 2)
		step("c joins", func() { s.start("c", true) }, "2/1/1", 1)
		// b's one or two jobs are freed at once; the survivors take them
		// (one may win two at once, and then hand one over).
		step("b goes", func() { s.leave("b") }, "2/2", 1)
		step("b returns", func() { s.start("b", true) }, "2/1/1", 1)
		step("d joins", func() { s.start("d", true) }, "1/1/1/1", 1)
		step("a and c go", func() { s.leave("a"); s.leave("c") }, "2/2", 1)
	})
}

// A live instance that runs none of the singletons (another config) never
// takes a job handed over to it: the job goes to another instance no less
// loaded. Each instance that saw its hand-over so wasted pauses its own,
// four periods, doubling up to 64, so the jobs do not shuttle between the
// others at the hand-over pace. An instance coming lifts the pause: it gets
// its share at once.
func TestSpreadPausesHandOversThatTheLeastLoadedDoesNotTake(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 4)
		s.start("a", true)
		s.start("b", true)
		settle(time.Minute)
		before := len(s.moves())
		s.start("idle", false)
		settle(time.Hour)
		moves := s.moves()[before:]
		byGiver := map[string][]time.Time{}
		for _, m := range moves {
			byGiver[m.from] = append(byGiver[m.from], m.at)
		}
		for giver, at := range byGiver {
			for i := 1; i < len(at); i++ {
				if gap, pause := at[i].Sub(at[i-1]), time.Duration(min(4<<(i-1), 64))*simPeriod; gap < pause {
					t.Errorf("%s's hand-overs %d and %d %v apart, want its pause (%v) at least", giver, i, i+1, gap, pause)
				}
			}
		}
		if len(moves) > 70 {
			t.Errorf("%d hand-overs in an hour beside an instance that takes nothing, want 70 at most (pauses up to 64 periods)", len(moves))
		}
		t.Logf("%d hand-overs in an hour beside an instance that takes nothing", len(moves))

		s.leave("idle")
		s.start("c", true)
		settle(4 * simPeriod)
		if got := s.loads(); got != "2/1/1" {
			t.Errorf("a few periods after c joined: %s, want 2/1/1", got)
		}
	})
}

// An operator resigns the only job of an instance (snip-jobs resign): the
// job goes to another instance and stays off the one that resigned it for
// the resign hold, although that one now leads two fewer than the new
// holder. The spread rule evens the load with another job instead, by one
// hand-over; once the hold is over the resigned job may move again.
func TestAResignedJobStaysOffItsInstanceForTheHoldAndTheSpreadMovesAnother(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 3)
		s.stopping = simPeriod / 4
		for _, name := range []string{"a", "b", "c"} {
			s.start(name, true)
			settle(time.Minute)
		}
		if got := s.loads(); got != "1/1/1" {
			t.Fatalf("before the resign: %s, want 1/1/1", got)
		}
		s.mu.Lock()
		var resigned, from string
		for job, h := range s.holder {
			if resigned == "" || job < resigned {
				resigned, from = job, h
			}
		}
		s.mu.Unlock()
		moves, asked := len(s.moves()), time.Now()
		s.requestResign(resigned)
		settle(DefaultResignHold - time.Second)

		for _, w := range s.wins {
			if w.job == resigned && w.instance == from && w.at.After(asked) {
				t.Errorf("%s won %s back %v after an operator resigned it there", from, resigned, w.at.Sub(asked))
			}
		}
		if got := s.loads(); got != "1/1/1" {
			t.Errorf("after the resign: %s, want 1/1/1", got)
		}
		if n := len(s.moves()) - moves; n != 1 {
			t.Errorf("%d hand-overs to even the load after the resign, want 1 (of another job)", n)
		}
	})
}
