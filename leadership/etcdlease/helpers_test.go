package etcdlease_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	benchtest.MostlyWaiting(16) // ~5 s of CPU in ~80 s of tests waiting for leases
	os.Exit(benchtest.RunMain(m))
}

// Short leases keep the tests quick; orderings, not durations, are asserted.
const (
	testTTL    = 2 * time.Second
	testMargin = 500 * time.Millisecond
	// patience bounds waits for things that must happen; it only decides how long
	// a broken build takes to fail, never whether a healthy one passes.
	patience = 60 * time.Second
)

// prefix gives every test its own key space.
func prefix(t testing.TB) string {
	return "/test/" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
}

type option func(*etcdlease.Config)

func withTTL(ttl, margin time.Duration) option {
	return func(c *etcdlease.Config) { c.TTL, c.Margin = ttl, margin }
}

func withRenew(d time.Duration) option { return func(c *etcdlease.Config) { c.RenewInterval = d } }

func withHost(h string) option { return func(c *etcdlease.Config) { c.Host = h } }

func config(t testing.TB, cli *clientv3.Client, instance string, opts ...option) etcdlease.Config {
	c := etcdlease.Config{Client: cli, Prefix: prefix(t), Config: leadership.Config{
		Instance: instance, TTL: testTTL, Margin: testMargin, Logger: benchtest.Logger(t),
	}}
	if _, bench := t.(*testing.B); bench {
		c.Logger = nil // benchmark output stays readable
	}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// startSession starts a session and waits for its first lease.
func startSession(t testing.TB, cli *clientv3.Client, instance string, opts ...option) *leadership.Session {
	t.Helper()
	s, err := etcdlease.NewSession(config(t, cli, instance, opts...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatalf("session %s: %v", instance, err)
	}
	return s
}

type won struct {
	term *leadership.Term
	err  error
}

// campaign runs Campaign in the background; the result arrives on the channel.
func campaign(ctx context.Context, s *leadership.Session, job string) <-chan won {
	ch := make(chan won, 1)
	go func() {
		t, err := s.Campaign(ctx, job)
		ch <- won{t, err}
	}()
	return ch
}

// await waits for a campaign started with campaign() to win.
func await(t testing.TB, ch <-chan won, who string) *leadership.Term {
	t.Helper()
	select {
	case w := <-ch:
		if w.err != nil {
			t.Fatalf("%s: campaign: %v", who, w.err)
		}
		return w.term
	case <-time.After(patience):
		t.Fatalf("%s: campaign did not win within %v", who, patience)
	}
	return nil
}

// mustWin campaigns and waits for the win.
func mustWin(t testing.TB, s *leadership.Session, job string) *leadership.Term {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	term, err := s.Campaign(ctx, job)
	if err != nil {
		t.Fatalf("%s: campaign %s: %v", s.Instance(), job, err)
	}
	return term
}

// waitEnded waits for a term's context to end and returns its reason.
func waitEnded(t testing.TB, term *leadership.Term) leadership.Reason {
	t.Helper()
	select {
	case <-term.Context().Done():
		return term.Reason()
	case <-time.After(patience):
		t.Fatalf("term %s/%d did not end within %v", term.Job(), term.Token(), patience)
	}
	return ""
}

// leaseTTL asks etcd (through cli) for a lease's remaining time in whole seconds,
// truncated: 0 means under a second left (or expired and not yet revoked); -1
// means etcd no longer has the lease.
func leaseTTL(t testing.TB, cli *clientv3.Client, id clientv3.LeaseID) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cli.TimeToLive(ctx, id)
	if err != nil {
		t.Fatalf("TimeToLive(%x): %v", int64(id), err)
	}
	return r.TTL
}

// waitStats waits until cond holds for the session's Stats, woken by the
// session at each change (StatsChanged), not by polling.
func waitStats(t testing.TB, s *leadership.Session, what string, cond func(leadership.Stats) bool) {
	t.Helper()
	benchtest.WaitChange(t, what, s.StatsChanged, func() bool { return cond(s.Stats()) })
}

// waitKeys waits until cond holds, woken by each change under the test's
// prefix (etcdtest.WaitKeys: an etcd watch).
func waitKeys(t testing.TB, cli *clientv3.Client, what string, cond func() bool) {
	t.Helper()
	etcdtest.WaitKeys(t, cli, prefix(t)+"/", what, cond)
}

// leaseAlive reports whether etcd still has the lease (and the keys on it).
func leaseAlive(t testing.TB, cli *clientv3.Client, id clientv3.LeaseID) bool {
	return leaseTTL(t, cli, id) >= 0
}

// eventually polls cond until it holds (benchtest.Eventually).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	benchtest.Eventually(t, what, cond)
}

// ledger records every term granted in a test and checks the two invariants:
// when a term is granted no other term of the job is valid, and tokens of a job
// strictly increase; at the end, validity intervals of a job do not overlap.
type ledger struct {
	mu    sync.Mutex
	terms map[string][]*leadership.Term
	next  chan struct{} // closed at the next grant booked (nil: nobody waits)
}

func newLedger() *ledger { return &ledger{terms: map[string][]*leadership.Term{}} }

func (l *ledger) granted(t testing.TB, term *leadership.Term) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	job := term.Job()
	for _, o := range l.terms[job] {
		// Valid is monotone: valid now means valid when term was granted.
		if o.Valid() {
			t.Errorf("job %s: term %d granted while term %d is still valid", job, term.Token(), o.Token())
		}
		if o.Token() >= term.Token() {
			t.Errorf("job %s: token %d granted after token %d", job, term.Token(), o.Token())
		}
	}
	l.terms[job] = append(l.terms[job], term)
	if l.next != nil {
		close(l.next)
		l.next = nil
	}
}

// changed returns a channel closed at the next grant booked.
func (l *ledger) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.next == nil {
		l.next = make(chan struct{})
	}
	return l.next
}

// waitFor waits until cond holds, woken by each grant booked.
func (l *ledger) waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	benchtest.WaitChange(t, what, l.changed, cond)
}

// last is the newest term booked for job, nil if none.
func (l *ledger) last(job string) *leadership.Term {
	l.mu.Lock()
	defer l.mu.Unlock()
	terms := l.terms[job]
	if len(terms) == 0 {
		return nil
	}
	return terms[len(terms)-1]
}

func (l *ledger) count(job string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.terms[job])
}

// checkNoOverlap: each term stopped being valid before the next one started.
func (l *ledger) checkNoOverlap(t testing.TB) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for job, terms := range l.terms {
		sort.Slice(terms, func(i, j int) bool { return terms[i].Token() < terms[j].Token() })
		for i := 1; i < len(terms); i++ {
			prev, next := terms[i-1], terms[i]
			end := prev.EndedAt()
			switch {
			case end.IsZero():
				t.Errorf("job %s: term %d still running when term %d started", job, prev.Token(), next.Token())
			case end.After(next.Started()):
				t.Errorf("job %s: term %d valid until %v after term %d started", job, prev.Token(), end.Sub(next.Started()), next.Token())
			}
		}
	}
}

func (l *ledger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for job, terms := range l.terms {
		fmt.Fprintf(&b, "%s:", job)
		for _, term := range terms {
			fmt.Fprintf(&b, " %d(%s)", term.Token(), term.Reason())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// leaseOf is the etcd lease a term hangs on.
func leaseOf(t testing.TB, term *leadership.Term) clientv3.LeaseID {
	t.Helper()
	return hexLease(t, term.Lease())
}

// hexLease is the etcd lease a session names in hex (Stats.Lease, Term.Lease).
func hexLease(t testing.TB, s string) clientv3.LeaseID {
	t.Helper()
	id, err := strconv.ParseInt(s, 16, 64)
	if err != nil {
		t.Fatalf("lease %q: %v", s, err)
	}
	return clientv3.LeaseID(id)
}
