// Package conformance is the guarantee's tests written once, against what
// every leadership backend hands out (sessions that campaign, terms with a
// token, a validity check and an end), and run against each backend with
// the real store beneath it: package leadership's on etcd, package
// kubelease's on a kube-apiserver. Each backend's own tests add what only it
// has (etcd's lease, death reclaim; the Kubernetes Lease layout).
//
// What a backend must show here: one valid term per job at a time and
// tokens that grow with every term; a resignation hands over at once; a
// leader cut off from its store is replaced only after its term stopped
// being valid, by at least the margin, on one monotonic clock; and the
// fence on real PostgreSQL refuses that leader's write after the takeover.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// Term is what the suite needs of a backend's term.
type Term interface {
	Job() string
	Token() int64
	Started() time.Time
	EndedAt() time.Time
	Context() context.Context
	Valid() bool
	Reason() leadership.Reason
	Resign(ctx context.Context) error
}

// Session is what the suite needs of a backend's session.
type Session[T Term] interface {
	Campaign(ctx context.Context, job string, opts ...leadership.CampaignOption) (T, error)
	Stats() leadership.Stats
	StatsChanged() <-chan struct{}
}

// Backend starts sessions of one backend.
type Backend[T Term] struct {
	// Margin is the sessions' stop-early margin.
	Margin time.Duration
	// Start starts a session of instance, ready, and closed when t ends;
	// cut makes every request it sends to its store fail from then on (the
	// process crashed or paused, as the store sees it).
	Start func(t *testing.T, instance string) (s Session[T], cut func())
}

// Run runs the suite against b, each test in parallel.
func Run[T Term](t *testing.T, b Backend[T]) {
	t.Run("OneTermAtATimeAndTokensGrow", func(t *testing.T) { t.Parallel(); oneTermAtATime(t, b) })
	t.Run("ResignHandsOverAtOnce", func(t *testing.T) { t.Parallel(); resignHandsOver(t, b) })
	t.Run("ACutOffLeaderIsReplacedAfterItsDeadlineAndFenced", func(t *testing.T) { t.Parallel(); cutOffLeader(t, b) })
}

// oneTermAtATime: three sessions take the job in turns, each resigning as
// soon as it has won; on this process's one monotonic clock no term starts
// before the one before it stopped being valid, and tokens grow.
func oneTermAtATime[T Term](t *testing.T, b Backend[T]) {
	const rounds = 9
	var sessions []Session[T]
	for _, name := range []string{"a", "b", "c"} {
		s, _ := b.Start(t, name)
		sessions = append(sessions, s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	terms := make(chan T)
	for _, s := range sessions {
		go func() {
			for ctx.Err() == nil {
				term, err := s.Campaign(ctx, "report")
				if err != nil {
					return
				}
				_ = term.Resign(context.Background())
				select {
				case terms <- term:
				case <-ctx.Done():
				}
			}
		}()
	}
	var got []T
	for range rounds {
		select {
		case term := <-terms:
			got = append(got, term)
		case <-time.After(benchtest.Patience):
			t.Fatalf("%d terms in %v, want %d", len(got), benchtest.Patience, rounds)
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Started().Before(got[j].Started()) })
	for i := 1; i < len(got); i++ {
		prev, next := got[i-1], got[i]
		if next.Token() <= prev.Token() {
			t.Errorf("term %d has token %d after token %d", i, next.Token(), prev.Token())
		}
		if next.Started().Before(prev.EndedAt()) {
			t.Errorf("token %d started at %v, before token %d stopped being valid (%v)",
				next.Token(), next.Started(), prev.Token(), prev.EndedAt())
		}
	}
}

// resignHandsOver: a waiting candidate wins as soon as the leader resigns,
// with a higher token, without waiting for any expiry.
func resignHandsOver[T Term](t *testing.T, b Backend[T]) {
	a, _ := b.Start(t, "a")
	c, _ := b.Start(t, "c")
	ta := win(t, a, "aggregate")
	next := campaign(c, "aggregate")
	waitWaiting(t, c)
	if err := ta.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	tc := await(t, next)
	if ta.Valid() || ta.Reason() != leadership.ReasonResigned {
		t.Errorf("the resigned term: valid %v, reason %q", ta.Valid(), ta.Reason())
	}
	if tc.Token() <= ta.Token() || tc.Started().Before(ta.EndedAt()) {
		t.Errorf("successor token %d started %v; resigned token %d ended %v", tc.Token(), tc.Started(), ta.Token(), ta.EndedAt())
	}
}

// cutOffLeader: the leader's store stops answering it; a waiting candidate
// wins only after the leader's term stopped being valid, by at least the
// margin; the old term ended by expiry; and the fence refuses the old
// token's write after the successor's.
func cutOffLeader[T Term](t *testing.T, b Backend[T]) {
	ctx := context.Background()
	pool, insert := Reports(t)
	a, cut := b.Start(t, "a")
	c, _ := b.Start(t, "c")
	ta := win(t, a, "weekly")
	fa, fc := fencing.New(pool, "a"), fencing.New(pool, "c")
	if err := fa.Do(ctx, "weekly", ta.Token(), insert(ta.Token(), "a before the cut")); err != nil {
		t.Fatal(err)
	}
	next := campaign(c, "weekly")
	waitWaiting(t, c)
	cut()
	tc := await(t, next)
	if ta.Valid() || tc.Token() <= ta.Token() {
		t.Fatalf("after the takeover: the cut-off term valid %v; tokens %d then %d", ta.Valid(), ta.Token(), tc.Token())
	}
	select {
	case <-ta.Context().Done():
	case <-time.After(benchtest.Patience):
		t.Fatal("the cut-off term's context did not end")
	}
	if ta.Reason() != leadership.ReasonExpired {
		t.Errorf("the cut-off term ended %q, want %q", ta.Reason(), leadership.ReasonExpired)
	}
	if gap := tc.Started().Sub(ta.EndedAt()); gap < b.Margin {
		t.Errorf("the successor started %v after the cut-off term stopped being valid; the protocol gives at least the margin %v", gap, b.Margin)
	}
	if err := fc.Do(ctx, "weekly", tc.Token(), insert(tc.Token(), "c")); err != nil {
		t.Fatal(err)
	}
	err := fa.Do(ctx, "weekly", ta.Token(), insert(ta.Token(), "a after the cut"))
	if !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("the cut-off leader's write after the takeover: %v, want %v", err, fencing.ErrStaleToken)
	}
	if n := benchtest.Value[int](t, pool, "SELECT count(*) FROM reports WHERE body = 'a after the cut'"); n != 0 {
		t.Errorf("the stale write left %d rows", n)
	}
}

// Reports is a database with a table of reports that fenced writes insert
// into: its pool, and insert, the write of one report by a term's token.
func Reports(t *testing.T) (*pgxpool.Pool, func(token int64, body string) func(context.Context, pgx.Tx) error) {
	url, pool := dbtest.New(t)
	dbtest.Exec(t, url, "CREATE TABLE reports (token bigint NOT NULL, body text NOT NULL)")
	return pool, func(token int64, body string) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO reports (token, body) VALUES ($1, $2)", token, body)
			return err
		}
	}
}

type result[T Term] struct {
	term T
	err  error
}

func campaign[T Term](s Session[T], job string) <-chan result[T] {
	ch := make(chan result[T], 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
		defer cancel()
		term, err := s.Campaign(ctx, job)
		ch <- result[T]{term, err}
	}()
	return ch
}

func await[T Term](t *testing.T, ch <-chan result[T]) T {
	t.Helper()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.term
}

func win[T Term](t *testing.T, s Session[T], job string) T {
	t.Helper()
	return await(t, campaign(s, job))
}

func waitWaiting[T Term](t *testing.T, s Session[T]) {
	t.Helper()
	benchtest.WaitChange(t, fmt.Sprintf("a campaign waiting (%T)", s), s.StatsChanged, func() bool { return s.Stats().Waiting > 0 })
}
