// Package conformance is the guarantee's tests written once, against what
// every leadership backend hands out (sessions that campaign, terms with a
// token, a validity check and an end), and run against each backend with
// the real store beneath it: package etcdlease on etcd, package
// kubelease on a kube-apiserver. Each backend's own tests add what only it
// has (etcd's keep-alive stream; the Kubernetes Lease layout).
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
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/leadership"
)

// Patience bounds the waits for what must happen; it decides only how long
// a broken backend takes to fail, never whether a healthy one passes.
const Patience = 60 * time.Second

// Backend starts sessions of one backend.
type Backend struct {
	// Margin is the sessions' stop-early margin.
	Margin time.Duration
	// Start starts a session of instance, ready, and closed when t ends;
	// cut makes every request it sends to its store fail from then on (the
	// process crashed or paused, as the store sees it).
	Start func(t *testing.T, instance string) (s *leadership.Session, cut func())
	// Database gives a test an empty PostgreSQL database of its own, for
	// the fence (the backend's test supplies it from the test kits).
	Database func(t *testing.T) *pgxpool.Pool
	// Cluster is the operators' view of the store the test's sessions use.
	Cluster func(t *testing.T) leadership.Cluster
}

// Run runs the suite against b, each test in parallel.
func Run(t *testing.T, b Backend) {
	t.Run("OneTermAtATimeAndTokensGrow", func(t *testing.T) { t.Parallel(); oneTermAtATime(t, b) })
	t.Run("ResignHandsOverAtOnce", func(t *testing.T) { t.Parallel(); resignHandsOver(t, b) })
	t.Run("ACutOffLeaderIsReplacedAfterItsDeadlineAndFenced", func(t *testing.T) { t.Parallel(); cutOffLeader(t, b) })
	t.Run("ATakenOverTermEndsAloneAndIsFenced", func(t *testing.T) { t.Parallel(); takenOver(t, b) })
}

// oneTermAtATime: three sessions take the job in turns, each resigning as
// soon as it has won; on this process's one monotonic clock no term starts
// before the one before it stopped being valid, and tokens grow.
func oneTermAtATime(t *testing.T, b Backend) {
	const rounds = 9
	var sessions []*leadership.Session
	for _, name := range []string{"a", "b", "c"} {
		s, _ := b.Start(t, name)
		sessions = append(sessions, s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	terms := make(chan *leadership.Term)
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
	var got []*leadership.Term
	for range rounds {
		select {
		case term := <-terms:
			got = append(got, term)
		case <-time.After(Patience):
			t.Fatalf("%d terms in %v, want %d", len(got), Patience, rounds)
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
func resignHandsOver(t *testing.T, b Backend) {
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
func cutOffLeader(t *testing.T, b Backend) {
	ctx := context.Background()
	pool := b.Database(t)
	insert := Reports(t, pool)
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
	case <-time.After(Patience):
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
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM reports WHERE body = 'a after the cut'").Scan(&n); err != nil || n != 0 {
		t.Errorf("the stale write left %d rows", n)
	}
}

// takenOver: another instance ends a term in the store (Cluster.TakeOver)
// while its holder lives and renews: a waiting candidate wins with a higher
// token, the holder's term ends taken-over while its lease and its other
// term go on, the fence refuses the old token's write after the
// successor's, and a takeover naming the old token leaves the new term be.
func takenOver(t *testing.T, b Backend) {
	ctx := context.Background()
	pool := b.Database(t)
	insert := Reports(t, pool)
	cluster := b.Cluster(t)
	a, _ := b.Start(t, "a")
	c, _ := b.Start(t, "c")
	ta, other := win(t, a, "counts"), win(t, a, "other")
	fa, fc := fencing.New(pool, "a"), fencing.New(pool, "c")
	if err := fa.Do(ctx, "counts", ta.Token(), insert(ta.Token(), "a before")); err != nil {
		t.Fatal(err)
	}
	next := campaign(c, "counts")
	waitWaiting(t, c)
	if taken, err := cluster.TakeOver(ctx, "counts", ta.Token(), "c"); err != nil || !taken {
		t.Fatalf("TakeOver of the live term: taken %v, %v", taken, err)
	}
	tc := await(t, next)
	select {
	case <-ta.Context().Done():
	case <-time.After(Patience):
		t.Fatal("the taken-over term's context did not end")
	}
	if ta.Reason() != leadership.ReasonTakenOver || tc.Token() <= ta.Token() {
		t.Errorf("the taken-over term ended %q (want %q); tokens %d then %d", ta.Reason(), leadership.ReasonTakenOver, ta.Token(), tc.Token())
	}
	if !other.Valid() || a.Stats().Lease == "" {
		t.Errorf("the holder's other term valid %v, lease %q: a takeover ends one term, not the lease", other.Valid(), a.Stats().Lease)
	}
	if err := fc.Do(ctx, "counts", tc.Token(), insert(tc.Token(), "c")); err != nil {
		t.Fatal(err)
	}
	if err := fa.Do(ctx, "counts", ta.Token(), insert(ta.Token(), "a after")); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("the taken-over term's write after the successor's: %v, want %v", err, fencing.ErrStaleToken)
	}
	if taken, err := cluster.TakeOver(ctx, "counts", ta.Token(), "c"); err != nil || taken || !tc.Valid() {
		t.Errorf("a takeover naming the old token: taken %v, %v; the new term valid %v", taken, err, tc.Valid())
	}
}

// Reports creates in pool's database a table of reports that fenced writes
// insert into, and returns insert, the write of one report by a term's token.
func Reports(t *testing.T, pool *pgxpool.Pool) func(token int64, body string) func(context.Context, pgx.Tx) error {
	if _, err := pool.Exec(context.Background(), "CREATE TABLE reports (token bigint NOT NULL, body text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return func(token int64, body string) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO reports (token, body) VALUES ($1, $2)", token, body)
			return err
		}
	}
}

type result struct {
	term *leadership.Term
	err  error
}

func campaign(s *leadership.Session, job string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), Patience)
		defer cancel()
		term, err := s.Campaign(ctx, job)
		ch <- result{term, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan result) *leadership.Term {
	t.Helper()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.term
}

func win(t *testing.T, s *leadership.Session, job string) *leadership.Term {
	t.Helper()
	return await(t, campaign(s, job))
}

func waitWaiting(t *testing.T, s *leadership.Session) {
	t.Helper()
	timeout := time.After(Patience)
	for ch := s.StatsChanged(); s.Stats().Waiting == 0; ch = s.StatsChanged() {
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("no campaign of %s waiting for the holder within %v", s.Instance(), Patience)
		}
	}
}
