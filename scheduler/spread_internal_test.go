package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// TestSpreadSettlesAtTwoEach and TestEquallyLoadedInstancesTakeOverWithoutHoldingBack.)
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

// An instance holds back a campaign only while it leads at least its fair
// share (ceil(singletons / live instances)) and another live instance leads
// fewer; equally loaded instances, and one below its share, campaign at once.
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
		{"below its fair share", 1, map[string]int{"a": 1, "b": 0, "c": 5}, nil, false},
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

// An instance hands a term over while it leads more than its fair share and
// another instance is up; never when alone.
func TestSpreadIsOverloadedAboveItsFairShareOnly(t *testing.T) {
	t.Parallel()
	cases := []struct {
		singletons, instances int
		leading               int64
		want                  bool
	}{
		{6, 3, 2, false},
		{6, 3, 3, true},
		{7, 3, 3, false}, // ceil(7/3) = 3
		{6, 1, 6, false},
		{6, 2, 4, true},
		{1, 3, 1, false},
	}
	for _, tc := range cases {
		sp := newSpread(&loadSession{}, "a", nil)
		sp.singletons = tc.singletons
		sp.instances.Store(int64(tc.instances))
		sp.leading.Store(tc.leading)
		if got := sp.overloaded(); got != tc.want {
			t.Errorf("%d singletons over %d instances, leading %d: overloaded %v, want %v",
				tc.singletons, tc.instances, tc.leading, got, tc.want)
		}
	}
}

// instancesSession is a loadSession whose instances are given too.
type instancesSession struct {
	loadSession
	names []string
}

func (f *instancesSession) WatchInstances(ctx context.Context, fn func(names []string)) {
	fn(f.names)
	<-ctx.Done()
}

// tokenTerm is a Term that only knows its token (what handOverOne logs).
type tokenTerm struct {
	Term
	token int64
}

func (t tokenTerm) Token() int64 { return t.token }

// An instance above its fair share hands over one term per period, not all
// at once (each successor's win changes the load the next decision sees),
// and stops once it is down to its share. Under testing/synctest's clock.
func TestSpreadHandsOverOneTermPerPeriodDownToItsFairShare(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sess := &instancesSession{loadSession: loadSession{load: map[string]int{}}, names: []string{"a", "b", "c"}}
		sp := newSpread(sess, "a", prometheus.NewCounterVec(prometheus.CounterOpts{Name: "h"}, []string{"job"}))
		sp.singletons = 6 // fair share: 2 each
		var jobs []*job
		for i := range 4 {
			j := &job{spec: configs.Job{Name: fmt.Sprint("job-", i)}, log: slog.New(slog.DiscardHandler), term: tokenTerm{token: int64(i + 1)}}
			j.stop = func(cause error) {
				if !errors.Is(cause, errRebalance) {
					t.Errorf("%s stopped by %v, want a rebalance", j.spec.Name, cause)
				}
				j.update(func() { j.term, j.stop = nil, nil }) // as the lifecycle's end does
				sp.leading.Add(-1)
			}
			j.changed = new(notify.Notifier)
			jobs = append(jobs, j)
		}
		sp.leading.Store(4)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go sp.loop(ctx, jobs)

		period := max(time.Second, sess.Config().RenewInterval)
		for i, want := range []int64{3, 2, 2, 2} {
			time.Sleep(period)
			synctest.Wait()
			if got := sp.leading.Load(); got != want {
				t.Fatalf("after %d periods: leading %d, want %d", i+1, got, want)
			}
		}
	})
}
