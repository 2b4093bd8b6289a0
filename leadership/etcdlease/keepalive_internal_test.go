package etcdlease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// sends records every keep-alive a session sends (its onKeepAlive hook).
type sends struct {
	mu  sync.Mutex
	log []sent
}

type sent struct {
	why sendReason
	at  time.Time
}

func (r *sends) hook(why sendReason, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, sent{why, at})
}

// since returns the keep-alives sent after t, in order.
func (r *sends) since(t time.Time) []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sent
	for _, s := range r.log {
		if s.at.After(t) {
			out = append(out, s)
		}
	}
	return out
}

func (r *sends) has(at time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.log, func(s sent) bool { return s.at.Equal(at) })
}

// recordedSession starts a session whose keep-alives are recorded, and waits
// for its first lease.
func recordedSession(t *testing.T, cli *clientv3.Client, cfg Config) (*leadership.Session, *store, *sends) {
	t.Helper()
	cfg.Client = cli
	if cfg.Prefix == "" {
		cfg.Prefix = "/ka-test/" + t.Name()
	}
	if cfg.TTL == 0 {
		cfg.TTL, cfg.Margin = 2*time.Second, 500*time.Millisecond
	}
	rec := &sends{}
	s, st := hookedSession(t, cfg, func(st *store) { st.onKeepAlive = rec.hook })
	return s, st, rec
}

// hookedSession starts a session on a store that hook sets test hooks on
// first, and waits for its first lease.
func hookedSession(t *testing.T, cfg Config, hook func(*store)) (*leadership.Session, *store) {
	t.Helper()
	cfg.Logger = benchtest.Logger(t)
	st, err := newStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hook(st)
	s, err := leadership.NewSession(st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return s, st
}

// nextRenewal waits until the session's newest acknowledged keep-alive is
// newer than after, and returns its send time.
func nextRenewal(t *testing.T, s *leadership.Session, after time.Time) time.Time {
	t.Helper()
	var at time.Time
	benchtest.WaitChange(t, "a keep-alive acknowledged", s.StatsChanged, func() bool {
		at = s.Stats().LastRenewal
		return at.After(after)
	})
	return at
}

// leaseKeepAlives is what etcd counted of LeaseKeepAlive: streams opened and
// requests received.
func leaseKeepAlives(m benchtest.Metrics) (streams, requests float64) {
	return m.Sum("grpc_server_started_total", `grpc_method="LeaseKeepAlive"`),
		m.Sum("grpc_server_msg_received_total", `grpc_method="LeaseKeepAlive"`)
}

// In steady state a session asks etcd for one thing: one keep-alive per renew
// interval, on one stream it keeps open, whatever the number of terms it
// holds; etcd ends nothing with an error. Counted at etcd's /metrics.
func TestSteadyStateIsOneKeepAlivePerIntervalOnOneStream(t *testing.T) {
	// Not parallel: etcd's gRPC metrics are process-wide, shared by every embedded member.
	etcd := etcdtest.Start(t, 1)
	s, _, _ := recordedSession(t, etcd.Client(t), Config{Config: leadership.Config{Instance: "steady"}})
	for i := range 50 {
		if _, err := s.Campaign(context.Background(), fmt.Sprint("job-", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Between two acknowledgements nothing is in flight: the counts on both
	// sides are complete.
	last := nextRenewal(t, s, time.Time{})
	last = nextRenewal(t, s, last)
	before, sentBefore := etcd.Metrics(t, 0), s.Stats().KeepAlivesSent
	for range 3 {
		last = nextRenewal(t, s, last)
	}
	d, sent := etcd.Metrics(t, 0).Minus(before), s.Stats().KeepAlivesSent-sentBefore

	streams, requests := leaseKeepAlives(d)
	if streams != 0 {
		t.Errorf("etcd saw %v new LeaseKeepAlive streams over %d keep-alives; want the one stream kept open", streams, sent)
	}
	if requests != float64(sent) || sent < 3 {
		t.Errorf("etcd received %v keep-alives, the session sent %d", requests, sent)
	}
	if all := d.Sum("grpc_server_msg_received_total"); all != requests {
		t.Errorf("etcd received %v requests in all, %v of them keep-alives: the session asks for more than keep-alives in steady state", all, requests)
	}
	if bad := d.NotOK(); bad != 0 {
		t.Errorf("etcd ended %v calls with an error code", bad)
	}
}

// On the one stream, an answer still counts from the send time of the request
// it answers, not from its arrival: through a link that delays each way, the
// lease's newest renewal is the send time of a keep-alive, at least the
// link's delay before the answer could arrive.
func TestAKeepAliveAnsweredLateCountsFromItsSendTime(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	link := etcd.Proxy(t, 0)
	const delay = 150 * time.Millisecond
	// Not about expiry: a lease that outlasts an etcd slow to answer under
	// load (at -p=4 a 4 s one lapsed, and the renewal seen was a new lease's
	// grant), renewed as often as a 4 s one.
	cfg := Config{Config: leadership.Config{Instance: "late", TTL: 10 * time.Second, Margin: 3 * time.Second, RenewInterval: time.Second}}
	s, _, rec := recordedSession(t, etcd.Client(t, link.Endpoint()), cfg)
	link.Delay(delay)
	last := nextRenewal(t, s, time.Now()) // sent through the delay
	for range 3 {
		last = nextRenewal(t, s, last)
		seen := time.Now()
		if !rec.has(last) {
			t.Fatalf("the lease's newest renewal %v is not the send time of any keep-alive", last)
		}
		if seen.Sub(last) < 2*delay {
			t.Fatalf("renewal counted from %v, only %v before its answer was seen through a link that delays %v each way",
				last, seen.Sub(last), delay)
		}
	}
}

// A keep-alive whose member goes away is sent again at once, on a new stream
// that the client puts on another member, and acknowledged there: the lease
// and its term carry on.
func TestAFailedKeepAliveIsSentAgainAtOnceOnAnotherMember(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 3)
	cfg := Config{Config: leadership.Config{Instance: "moving", TTL: 10 * time.Second, Margin: 3 * time.Second}}
	s, st, rec := recordedSession(t, etcd.Client(t), cfg)
	term, err := s.Campaign(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	first := nextRenewal(t, s, time.Time{}) // the grant
	nextRenewal(t, s, first)                // a keep-alive
	carrier := st.keepAliveMember(t, etcd)
	lease := s.Stats().Lease
	stopped := time.Now()
	etcd.Stop(t, carrier)
	renewed := nextRenewal(t, s, stopped)

	after := rec.since(stopped)
	i := slices.IndexFunc(after, func(x sent) bool { return x.why != sendScheduled })
	if i < 0 || after[i].why != sendAtOnce {
		t.Fatalf("keep-alives after member %d stopped: %v; want the first retry sent at once", carrier, after)
	}
	if renewed.Before(after[i].at) {
		t.Fatalf("renewed by a keep-alive sent at %v, before the retry at %v", renewed, after[i].at)
	}
	if got := s.Stats().Lease; got != lease || !term.Valid() {
		t.Fatalf("lease %s → %s, term valid %v: the loss of one member ended the lease", lease, got, term.Valid())
	}
	nextRenewal(t, s, renewed)
	if now := st.keepAliveMember(t, etcd); now == carrier {
		t.Fatalf("the keep-alive stream is still on member %d", carrier)
	}
}

// keepAliveMember is the index of the member the session's keep-alive
// stream reached.
func (s *store) keepAliveMember(t *testing.T, etcd *etcdtest.Cluster) int {
	t.Helper()
	if m := s.kaMember.Load(); m != nil {
		for i := range etcd.Size() {
			if strings.HasSuffix(etcd.Endpoint(i), "//"+*m) {
				return i
			}
		}
		t.Fatalf("the keep-alive stream reached %s, which is no member", *m)
	}
	t.Fatal("no keep-alive stream has reached a member")
	return -1
}

// With no member answering, a keep-alive is given up on after the patience,
// sent again at once, then at the retry pace, until the deadline; none is
// sent once the lease has ended. A machine too busy to give up on the retry
// sent at once before the deadline shows no paced one: that is detected, and
// tried again with a longer TTL.
func TestUnansweredKeepAlivesAreRetriedAtAPaceUntilTheDeadline(t *testing.T) {
	t.Parallel()
	// The longer leases keep renewing every second, so a paced retry has
	// seconds before the deadline rather than the first one's 0.6 s.
	for _, c := range []leadership.Config{
		{TTL: 4 * time.Second, Margin: time.Second},
		{TTL: 8 * time.Second, Margin: time.Second, RenewInterval: time.Second},
		{TTL: 16 * time.Second, Margin: time.Second, RenewInterval: time.Second},
	} {
		if !unansweredKeepAlives(t, c) {
			return
		}
		t.Logf("TTL %v: the deadline came before the retry sent at once could be given up on (a busy machine); trying a longer TTL", c.TTL)
	}
	t.Fatal("no TTL left the time to see a paced retry")
}

// unansweredKeepAlives cuts a session of timing c off etcd and checks its
// keep-alives until its term expired; tooBusy when the deadline came before
// a paced retry was due.
func unansweredKeepAlives(t *testing.T, c leadership.Config) (tooBusy bool) {
	etcd := etcdtest.Start(t, 1)
	link := etcd.Proxy(t, 0)
	c.Instance = "cut"
	s, st, rec := recordedSession(t, etcd.Client(t, link.Endpoint()), Config{Prefix: fmt.Sprintf("/ka-test/%s/%v", t.Name(), c.TTL), Config: c})
	term, err := s.Campaign(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	link.Blackhole()
	select {
	case <-term.Context().Done():
	case <-time.After(time.Minute):
		t.Fatal("the term outlived a minute without etcd")
	}
	if r := term.Reason(); r != leadership.ReasonExpired {
		t.Fatalf("term ended %q, want %q", r, leadership.ReasonExpired)
	}
	end := term.EndedAt()
	var whys []sendReason
	var atOnce time.Time
	for _, x := range rec.since(cut) {
		if x.at.After(end) {
			t.Errorf("a keep-alive was sent at %v, after the lease ended at %v", x.at, end)
		}
		if x.why == sendAtOnce && atOnce.IsZero() {
			atOnce = x.at
		}
		whys = append(whys, x.why)
	}
	at := slices.Index(whys, sendAtOnce)
	if at >= 0 && at+1 == len(whys) && atOnce.Add(st.patience()+st.retryPace()).After(end) {
		return true
	}
	if at < 0 || at+1 >= len(whys) || whys[at+1] != sendPaced || slices.Index(whys[at+1:], sendAtOnce) >= 0 {
		t.Fatalf("keep-alives after the cut: %v; want a retry at once, then retries at the pace (%v apart)", whys, st.retryPace())
	}
	if f := s.Stats().KeepAliveFailures; f < int64(len(whys)-1) {
		t.Fatalf("%d failures counted for %d keep-alives", f, len(whys))
	}
	return false
}

func (r sendReason) String() string {
	return [...]string{"scheduled", "at-once", "paced"}[r]
}

func (x sent) String() string { return x.why.String() }
