package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// The leader lifecycle decides what to do when a term starts and ends; which
// terms exist is the session's business. These tests hand the scheduler terms
// from a fake session and end them at will, so that each decision is seen
// alone and at once. That the terms themselves are exclusive, and the whole
// works on real etcd, is shown in scheduler_test.go and package leadership.

// fakeTerm is a term the test ends when it likes.
type fakeTerm struct {
	job      string
	token    int64
	started  time.Time
	ctx      context.Context
	end      context.CancelCauseFunc
	resigned chan struct{} // closed at the first Resign
	once     sync.Once
}

func newFakeTerm(job string, token int64) *fakeTerm {
	ctx, end := context.WithCancelCause(context.Background())
	return &fakeTerm{job: job, token: token, started: time.Now(), ctx: ctx, end: end, resigned: make(chan struct{})}
}

func (t *fakeTerm) Job() string              { return t.job }
func (t *fakeTerm) Token() int64             { return t.token }
func (t *fakeTerm) Lease() string            { return "fake" }
func (t *fakeTerm) Started() time.Time       { return t.started }
func (t *fakeTerm) Context() context.Context { return t.ctx }
func (t *fakeTerm) Valid() bool              { return t.ctx.Err() == nil }
func (t *fakeTerm) Deadline() time.Time      { return t.started.Add(time.Hour) }
func (t *fakeTerm) Reason() leadership.Reason {
	return leadership.ReasonOf(context.Cause(t.ctx))
}

// expire ends the term as a lease that ran out would.
func (t *fakeTerm) expire() { t.end(&leadership.EndedError{Reason: leadership.ReasonExpired}) }

func (t *fakeTerm) Resign(context.Context) error {
	t.end(&leadership.EndedError{Reason: leadership.ReasonResigned})
	t.once.Do(func() { close(t.resigned) })
	return nil
}

// campaign is one Campaign call as the fake session saw it.
type campaign struct {
	job      string
	holdback time.Duration // what the scheduler asked to wait before the attempt
}

// fakeSession grants, to each Campaign, the next term the test sends on
// grants, and hands the test the function the scheduler registered for
// operators' resign requests.
type fakeSession struct {
	campaigns chan campaign
	grants    chan *fakeTerm
	resigns   chan func(job string, token int64)
}

func newFakeSession() *fakeSession {
	return &fakeSession{campaigns: make(chan campaign), grants: make(chan *fakeTerm), resigns: make(chan func(string, int64), 1)}
}

func (s *fakeSession) Config() leadership.Config {
	return leadership.Config{Instance: "server-1", TTL: 2 * time.Second, Margin: 500 * time.Millisecond, RenewInterval: 400 * time.Millisecond}
}

func (s *fakeSession) Campaign(ctx context.Context, job string, opts ...leadership.CampaignOption) (scheduler.Term, error) {
	var hold time.Duration
	if f := leadership.Holdback(opts...); f != nil {
		hold = f()
	}
	select {
	case s.campaigns <- campaign{job, hold}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case t := <-s.grants:
		return t, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *fakeSession) Deregister(context.Context) error { return nil }

func (s *fakeSession) WatchInstances(ctx context.Context, f func(names []string)) {
	f([]string{"server-1"})
	<-ctx.Done()
}

func (s *fakeSession) WatchResignRequests(ctx context.Context, f func(job string, token int64)) {
	s.resigns <- f
	<-ctx.Done()
}

func (s *fakeSession) ClusterLoad(context.Context) (map[string]int, error) {
	return map[string]int{"server-1": 0}, nil
}

func (s *fakeSession) Stats() leadership.Stats { return leadership.Stats{} }

// holder is a continuous job that says when each term's run starts and
// when its context ends.
type holder struct {
	started chan started
	stopped chan int64 // the token of a run whose context ended
}

// started is a run begun under a term.
type started struct {
	token int64
	ctx   context.Context // the run's
}

func newHolder() holder { return holder{started: make(chan started), stopped: make(chan int64)} }

func (h holder) typ() scheduler.Type {
	return scheduler.Type{Name: "hold", New: func(scheduler.Env, configs.Job) (scheduler.Job, error) {
		return scheduler.JobFunc(func(ctx context.Context, r *scheduler.Run) error {
			h.started <- started{r.Token, ctx}
			<-ctx.Done()
			h.stopped <- r.Token
			return nil
		}), nil
	}}
}

// startOnFake runs a scheduler with one leader-mode job on the fake session
// (and a real database for its records and fence).
func startOnFake(t *testing.T, s *fakeSession, h holder) *prometheus.Registry {
	t.Helper()
	db := dbtest.NewDB(t)
	metrics := prometheus.NewRegistry()
	sched, err := scheduler.New(scheduler.Config{
		File:     &configs.File{Instance: "server-1", Jobs: []configs.Job{jobtest.Continuous("job", "hold")}},
		Registry: jobtest.Registry(t, h.typ()), Session: s, Pool: dbtest.Pool(t, db.Runtime),
		Metrics: metrics, Log: benchtest.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sched.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("scheduler: %v", err)
		}
	})
	return metrics
}

func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(benchtest.Patience):
		t.Fatalf("waited %v for %s", benchtest.Patience, what)
		panic("unreachable")
	}
}

// A term that ends under a running job (its lease expired) stops the job's
// run, is resigned, is counted by its reason, and the job campaigns again at
// once; the next term's run carries the next term's token.
func TestWhenATermEndsTheRunStopsAndTheJobCampaignsAgain(t *testing.T) {
	t.Parallel()
	s, h := newFakeSession(), newHolder()
	metrics := startOnFake(t, s, h)

	if c := recv(t, "a campaign", s.campaigns); c.job != "job" || c.holdback != 0 {
		t.Fatalf("first campaign %+v, want job without holdback", c)
	}
	first := newFakeTerm("job", 7)
	s.grants <- first
	if tok := recv(t, "the run of term 7", h.started).token; tok != 7 {
		t.Fatalf("the run started with token %d, want 7", tok)
	}

	first.expire()
	if tok := recv(t, "the run of term 7 to stop", h.stopped); tok != 7 {
		t.Fatalf("the run of token %d stopped, want 7", tok)
	}
	recv(t, "term 7 to be resigned", first.resigned)
	if c := recv(t, "the next campaign", s.campaigns); c.holdback != 0 {
		t.Errorf("after an expiry the next campaign holds back %v, want 0: the job should be led again at once", c.holdback)
	}
	if n := jobtest.MetricSum(t, metrics, "snip_jobs_term_ends_total", "job", "job", "reason", string(leadership.ReasonExpired)); n != 1 {
		t.Errorf("term ends counted as expired: %v, want 1", n)
	}

	s.grants <- newFakeTerm("job", 9)
	if tok := recv(t, "the run of term 9", h.started).token; tok != 9 {
		t.Fatalf("the next run started with token %d, want 9", tok)
	}
}

// An operator's request to resign the term being led stops the run and
// resigns; the next campaign on this instance holds back, so that another
// instance takes the job. A request naming an older token is not this term's.
func TestAResignRequestHandsTheTermOverAndHoldsTheNextCampaign(t *testing.T) {
	t.Parallel()
	s, h := newFakeSession(), newHolder()
	metrics := startOnFake(t, s, h)
	resign := recv(t, "the resign request watch", s.resigns)

	recv(t, "a campaign", s.campaigns)
	term := newFakeTerm("job", 12)
	s.grants <- term
	run := recv(t, "the run of term 12", h.started)

	// The scheduler acts on a request before the call returns: a request
	// that were taken for this term's would have ended the run's context.
	resign("job", 11) // an older term's request
	resign("other-job", 12)
	if err := context.Cause(run.ctx); err != nil {
		t.Fatalf("a resign request for token 11 or for another job ended the run of term 12: %v", err)
	}
	resign("job", 12)
	recv(t, "the run of term 12 to stop", h.stopped)
	recv(t, "term 12 to be resigned", term.resigned)
	if c := recv(t, "the next campaign", s.campaigns); c.holdback <= 0 {
		t.Errorf("after a resign request the next campaign holds back %v, want a wait for another instance to win", c.holdback)
	}
	if n := jobtest.MetricSum(t, metrics, "snip_jobs_term_ends_total", "job", "job", "reason", status.EndResignRequest); n != 1 {
		t.Errorf("term ends counted as resign_request: %v, want 1", n)
	}
}
