package fencing_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/internal/notify"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

func TestWriteWithCurrentOrHigherTokenCommitsAndAdvances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	a := fencing.New(d.pool("a"), "node-a")
	b := fencing.New(d.pool("b"), "node-b")
	const res = "report:weekly"

	d.wantToken(res, 0, "") // never written

	if err := a.Do(ctx, res, 5, insertReport(res, 5, "first")); err != nil {
		t.Fatalf("first write, token 5: %v", err)
	}
	d.wantToken(res, 5, "node-a")

	if err := a.Do(ctx, res, 5, insertReport(res, 5, "same term again")); err != nil {
		t.Fatalf("second write of the same term, token 5: %v", err)
	}
	d.wantToken(res, 5, "node-a")

	if err := b.Do(ctx, res, 9, insertReport(res, 9, "newer term")); err != nil {
		t.Fatalf("write of a newer term, token 9: %v", err)
	}
	d.wantToken(res, 9, "node-b")
	d.wantReports(res, "first", "same term again", "newer term")
}

func TestWriteWithLowerTokenIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	type reject struct {
		resource       string
		token, current int64
	}
	var rejects []reject
	a := fencing.New(d.pool("a"), "node-a", fencing.WithRejectHook(func(resource string, token, current int64) {
		rejects = append(rejects, reject{resource, token, current})
	}))
	b := fencing.New(d.pool("b"), "node-b")
	const res = "report:weekly"

	if err := b.Do(ctx, res, 8, insertReport(res, 8, "by term 8")); err != nil {
		t.Fatal(err)
	}
	err := a.Do(ctx, res, 7, mustNotRun(t))
	wantStale(t, err, fencing.StaleTokenError{Resource: res, Token: 7, Current: 8, Holder: "node-b"})
	for _, part := range []string{`"report:weekly"`, "token 7", "token 8", `"node-b"`} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not mention %s", err, part)
		}
	}
	if want := []reject{{res, 7, 8}}; len(rejects) != 1 || rejects[0] != want[0] {
		t.Errorf("reject hook calls %v, want %v", rejects, want)
	}
	d.wantToken(res, 8, "node-b")
	d.wantReports(res, "by term 8")
}

// A newer term holds the resource's row; an older one arrives, waits for the
// row lock, and once the newer one commits, is refused.
func TestOlderWriterWaitsForNewerAndIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		prior        int64 // token written before the two race; 0: none
		serializable bool  // the database's default isolation level
	}{
		{"row exists", 3, false},
		{"first write ever", 0, false},
		// Do runs at READ COMMITTED whatever the default: at SERIALIZABLE the
		// waiter would fail with a serialization error, not StaleTokenError.
		{"database defaults to serializable", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			d := newDB(t)
			if tc.serializable {
				d.setDefaultIsolation("serializable")
			}
			older := fencing.New(d.pool("writer-4"), "node-a")
			newer := fencing.New(d.pool("writer-5"), "node-b")
			const res = "report:weekly"
			if tc.prior > 0 {
				if err := older.Do(ctx, res, tc.prior, insertReport(res, tc.prior, "prior")); err != nil {
					t.Fatal(err)
				}
			}

			five := startHoldingWrite(t, newer, res, 5, "by 5")
			four := goDo(older, res, 4, mustNotRun(t))

			blocked := d.waitBlocked("writer-4", five.pid)
			t.Logf("token 4 (backend %d) waits for the row lock of token 5 (backend %d)", blocked, five.pid)
			wantPending(t, four, "token 4's write")

			five.let()
			if err := <-five.done; err != nil {
				t.Fatalf("token 5: %v", err)
			}
			wantStale(t, <-four, fencing.StaleTokenError{Resource: res, Token: 4, Current: 5, Holder: "node-b"})
			d.wantToken(res, 5, "node-b")
			if tc.prior > 0 {
				d.wantReports(res, "prior", "by 5")
			} else {
				d.wantReports(res, "by 5")
			}
		})
	}
}

// The reverse order: the older term holds the row, the newer waits, then both
// commit and the newer token is what stays.
func TestNewerWriterWaitsForOlderAndThenWrites(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	older := fencing.New(d.pool("writer-4"), "node-a")
	newer := fencing.New(d.pool("writer-5"), "node-b")
	const res = "report:weekly"

	four := startHoldingWrite(t, older, res, 4, "by 4")
	var fiveRan sync.WaitGroup
	fiveRan.Add(1)
	five := goDo(newer, res, 5, func(ctx context.Context, tx pgx.Tx) error {
		fiveRan.Done()
		return insertReport(res, 5, "by 5")(ctx, tx)
	})

	d.waitBlocked("writer-5", four.pid)
	wantPending(t, five, "token 5's write")

	four.let()
	if err := <-four.done; err != nil {
		t.Fatalf("token 4: %v", err)
	}
	if err := <-five; err != nil {
		t.Fatalf("token 5: %v", err)
	}
	fiveRan.Wait()
	d.wantToken(res, 5, "node-b")
	d.wantReports(res, "by 4", "by 5")
}

func TestFunctionErrorRollsBackTheTokenAdvance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	f := fencing.New(d.pool("a"), "node-a")
	const res = "report:weekly"
	if err := f.Do(ctx, res, 3, insertReport(res, 3, "by 3")); err != nil {
		t.Fatal(err)
	}

	boom := errors.New("CA said no")
	err := f.Do(ctx, res, 7, func(ctx context.Context, tx pgx.Tx) error {
		if err := insertReport(res, 7, "by 7")(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do: %v, want the function's error wrapped", err)
	}
	if errors.Is(err, fencing.ErrStaleToken) {
		t.Errorf("function error %v matches ErrStaleToken", err)
	}
	d.wantToken(res, 3, "node-a")
	d.wantReports(res, "by 3")
}

// A function that swallows a failed statement still does not commit: the
// transaction is aborted, and Do reports it.
func TestFunctionThatIgnoresAFailedStatementDoesNotCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	f := fencing.New(d.pool("a"), "node-a")
	const res = "report:weekly"

	err := f.Do(ctx, res, 3, func(ctx context.Context, tx pgx.Tx) error {
		if err := insertReport(res, 3, "by 3")(ctx, tx); err != nil {
			return err
		}
		_, _ = tx.Exec(ctx, "SELECT * FROM no_such_table") // error ignored
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("Do: %v, want pgx.ErrTxCommitRollback wrapped", err)
	}
	d.wantToken(res, 0, "")
	d.wantReports(res)
}

// The term ends (its context is cancelled) in the middle of the write: nothing
// is kept.
func TestCancelledContextWritesNothing(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	f := fencing.New(d.pool("a"), "node-a")
	const res = "report:weekly"

	ctx, cancel := context.WithCancel(context.Background())
	err := f.Do(ctx, res, 3, func(ctx context.Context, tx pgx.Tx) error {
		if err := insertReport(res, 3, "by 3")(ctx, tx); err != nil {
			return err
		}
		cancel() // the term ends here
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do: %v, want context.Canceled", err)
	}
	d.wantToken(res, 0, "")
	d.wantReports(res)
}

func TestPanicInFunctionRollsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	f := fencing.New(d.pool("a"), "node-a")
	const res = "report:weekly"

	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the function's panic", r)
			}
		}()
		_ = f.Do(ctx, res, 3, func(ctx context.Context, tx pgx.Tx) error {
			if err := insertReport(res, 3, "by 3")(ctx, tx); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	d.wantToken(res, 0, "")
	d.wantReports(res)
	if err := f.Do(ctx, res, 3, insertReport(res, 3, "after the panic")); err != nil {
		t.Fatalf("write after the panic: %v", err)
	}
	d.wantReports(res, "after the panic")
}

func TestSeparateResourcesDoNotInterfere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	f := fencing.New(d.pool("a"), "node-a")

	// The weekly report's writer holds its row with a high token...
	weekly := startHoldingWrite(t, f, "report:weekly", 100, "weekly by 100")
	// ...while a low token writes another resource, to completion.
	if err := f.Do(ctx, "aggregate:clicks", 1, insertReport("aggregate:clicks", 1, "clicks by 1")); err != nil {
		t.Fatalf("write to another resource: %v", err)
	}
	wantPending(t, weekly.done, "the weekly report's write")
	weekly.let()
	if err := <-weekly.done; err != nil {
		t.Fatal(err)
	}
	if err := f.Do(ctx, "aggregate:clicks", 2, insertReport("aggregate:clicks", 2, "clicks by 2")); err != nil {
		t.Fatalf("token 2 on a resource at 1, while another is at 100: %v", err)
	}
	d.wantToken("report:weekly", 100, "node-a")
	d.wantToken("aggregate:clicks", 2, "node-a")
	d.wantReports("aggregate:clicks", "clicks by 1", "clicks by 2")
}

// The story fencing exists for. Term A (token 10) starts the weekly report,
// writes its first row, and is paused just before its second. Its lease
// expires; term B (token 11) writes the report and commits. A wakes up and
// writes: refused, and none of its second write is in the table.
func TestPausedLeaderIsRefused(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	termA := fencing.New(d.pool("a"), "node-a")
	termB := fencing.New(d.pool("b"), "node-b")
	const res = "report:weekly:2026-W48"

	paused := make(chan struct{})
	resume := make(chan struct{})
	resultA := make(chan error, 1)
	go func() {
		ctx := context.Background()
		if err := termA.Do(ctx, res, 10, insertReport(res, 10, "A: started")); err != nil {
			resultA <- err
			return
		}
		close(paused) // SIGSTOP, a long GC pause, a suspended VM
		<-resume
		resultA <- termA.Do(ctx, res, 10, insertReport(res, 10, "A: report"))
	}()

	select {
	case <-paused:
	case err := <-resultA:
		t.Fatalf("term A's first write: %v", err)
	}
	if err := termB.Do(context.Background(), res, 11, insertReport(res, 11, "B: report")); err != nil {
		t.Fatalf("term B: %v", err)
	}
	close(resume)
	wantStale(t, <-resultA, fencing.StaleTokenError{Resource: res, Token: 10, Current: 11, Holder: "node-b"})
	d.wantToken(res, 11, "node-b")
	d.wantReports(res, "A: started", "B: report")
}

func TestInvalidArgumentsAreErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	pool := d.pool("a")
	ok := func(context.Context, pgx.Tx) error { return nil }
	for _, tc := range []struct {
		name     string
		fence    *fencing.Fence
		resource string
		token    int64
		fn       func(context.Context, pgx.Tx) error
	}{
		{"empty resource", fencing.New(pool, "node-a"), "", 1, ok},
		{"zero token", fencing.New(pool, "node-a"), "r", 0, ok},
		{"negative token", fencing.New(pool, "node-a"), "r", -1, ok},
		{"nil function", fencing.New(pool, "node-a"), "r", 1, nil},
		{"empty holder", fencing.New(pool, ""), "r", 1, ok},
		{"nil pool", fencing.New(nil, "node-a"), "r", 1, ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fence.Do(ctx, tc.resource, tc.token, tc.fn)
			if !errors.Is(err, fencing.ErrInvalidArgument) {
				t.Errorf("Do: %v, want ErrInvalidArgument", err)
			}
		})
	}
	var n int
	if err := d.obs.QueryRow(ctx, "SELECT count(*) FROM fencing_tokens").Scan(&n); err != nil || n != 0 {
		t.Errorf("fencing_tokens has %d rows (%v), want none", n, err)
	}
}

// A writer that holds the row and then goes silent (its link to PostgreSQL cut
// or slow, its term over) is ended by PostgreSQL after the idle timeout, and
// the writer waiting behind it proceeds instead of waiting for TCP to notice.
func TestASilentHolderIsEndedAfterTheIdleTimeoutAndTheNextWriterProceeds(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	const res = "report:weekly"
	silent := fencing.New(d.pool("writer-5"), "node-a", fencing.WithIdleTimeout(300*time.Millisecond))
	next := fencing.New(d.pool("writer-6"), "node-b")

	five := startHoldingWrite(t, silent, res, 5, "by 5") // holds the row, then says nothing
	six := goDo(next, res, 6, insertReport(res, 6, "by 6"))
	select {
	case err := <-six:
		if err != nil {
			t.Fatalf("token 6 behind a silent holder: %v", err)
		}
	case <-time.After(patience):
		t.Fatalf("token 6 still waits behind the silent holder after %v", patience)
	}
	wantPending(t, five.done, "the silent holder") // still "working", unaware
	five.let()
	if err := <-five.done; err == nil {
		t.Fatal("the silent holder's transaction committed after PostgreSQL ended it")
	}
	d.wantToken(res, 6, "node-b")
	d.wantReports(res, "by 6")
}

// A writer with a newer token that waits behind an older term's open
// transaction (a leader cut off with its link to PostgreSQL slow or gone) ends
// that transaction after the break delay and writes; the older write is rolled
// back, never applied. The waiting is the fence's row lock; the break only
// does early what the fence would do anyway: refuse the older term. The
// writer's pool has one connection, the one waiting: the break connects on
// its own.
func TestANewerWriterEndsAStaleHolderAndWrites(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	const res = "report:weekly"
	var broken []fencing.StaleHolder
	var mu sync.Mutex
	var reports notify.Notifier
	stale := fencing.New(d.pool("writer-5"), "node-a")
	next := fencing.New(d.poolOf("writer-6", 1), "node-b", fencing.WithStaleHolderBreak(100*time.Millisecond, func(h fencing.StaleHolder) {
		mu.Lock()
		broken = append(broken, h)
		mu.Unlock()
		reports.Notify()
	}))

	five := startHoldingWrite(t, stale, res, 5, "by 5") // holds the row, then says nothing
	if err := <-goDo(next, res, 6, insertReport(res, 6, "by 6")); err != nil {
		t.Fatalf("token 6 behind a stale holder: %v", err)
	}
	five.let()
	if err := <-five.done; err == nil {
		t.Fatal("the stale holder's transaction committed after it was ended")
	}
	d.wantToken(res, 6, "node-b")
	d.wantReports(res, "by 6")
	// The break is reported by its own goroutine, which may read the
	// query's answer after the write it unblocked has returned.
	benchtest.WaitChange(t, "the break reported", reports.Wait, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(broken) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(broken) != 1 || broken[0] != (fencing.StaleHolder{Resource: res, Token: 6, HolderToken: 5, HolderPID: five.pid}) {
		t.Fatalf("holders ended: %+v; want token 5's backend %d, once", broken, five.pid)
	}
}

// The write a break unblocked does not wait for the break's answer: over a
// slow link (here every answer on the break's own connection comes 3 s
// late) that wait would keep the write's transaction idle, holding the row
// and perhaps past its idle timeout. The write commits and returns before
// the answer naming the ended holder has arrived; the report follows.
func TestTheWriteABreakUnblockedDoesNotWaitForTheBreaksAnswer(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	const res = "report:weekly"
	var mu sync.Mutex
	var broken []fencing.StaleHolder
	var reports notify.Notifier
	reported := func() int { mu.Lock(); defer mu.Unlock(); return len(broken) }

	var late atomic.Bool // connections dialled while set read every answer late
	cfg := d.poolConfig("writer-6", 1)
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil && late.Load() {
			c = &lateConn{Conn: c, delay: 3 * time.Second}
		}
		return c, err
	}
	pool := d.poolWith(cfg)
	if err := pool.Ping(context.Background()); err != nil { // the writer's own connection: on time
		t.Fatal(err)
	}
	late.Store(true) // the break's connection, dialled when it starts
	next := fencing.New(pool, "node-b", fencing.WithStaleHolderBreak(100*time.Millisecond, func(h fencing.StaleHolder) {
		mu.Lock()
		broken = append(broken, h)
		mu.Unlock()
		reports.Notify()
	}))

	five := startHoldingWrite(t, fencing.New(d.pool("writer-5"), "node-a"), res, 5, "by 5")
	if err := <-goDo(next, res, 6, insertReport(res, 6, "by 6")); err != nil {
		t.Fatalf("token 6 behind a stale holder: %v", err)
	}
	if n := reported(); n != 0 {
		t.Fatalf("the write returned after the break's answer (%d reports): it waited for it", n)
	}
	d.wantReports(res, "by 6")
	benchtest.WaitChange(t, "the break reported the holder it ended", reports.Wait, func() bool { return reported() > 0 })
	five.let()
	if err := <-five.done; err == nil {
		t.Fatal("the stale holder's transaction committed after it was ended")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(broken) != 1 || broken[0].HolderToken != 5 || broken[0].HolderPID != five.pid {
		t.Fatalf("holders ended: %+v; want token 5's backend %d, once", broken, five.pid)
	}
}

// lateConn is a connection whose every read waits delay first: a link that
// delivers answers late.
type lateConn struct {
	net.Conn
	delay time.Duration
}

func (c *lateConn) Read(b []byte) (int, error) {
	time.Sleep(c.delay)
	return c.Conn.Read(b)
}

// The break never ends a holder with a newer (or the same) token, nor a lock
// holder that is not a fenced write: the older writer waits, and is refused
// once the newer one has committed.
func TestTheBreakLeavesNewerHoldersAndOtherLockersAlone(t *testing.T) {
	t.Parallel()
	d := newDB(t)
	const res = "report:weekly"
	ended := func(h fencing.StaleHolder) { t.Errorf("ended %+v", h) }
	older := fencing.New(d.pool("writer-4"), "node-a", fencing.WithStaleHolderBreak(50*time.Millisecond, ended))
	newer := fencing.New(d.pool("writer-5"), "node-b", fencing.WithStaleHolderBreak(50*time.Millisecond, ended))

	t.Run("a newer holder", func(t *testing.T) {
		five := startHoldingWrite(t, newer, res, 5, "by 5")
		four := goDo(older, res, 4, insertReport(res, 4, "by 4"))
		d.waitBlocked("writer-4", five.pid)
		time.Sleep(300 * time.Millisecond) // several break attempts
		wantPending(t, four, "token 4's write")
		five.let()
		if err := <-five.done; err != nil {
			t.Fatalf("token 5: %v", err)
		}
		if err := <-four; !errors.Is(err, fencing.ErrStaleToken) {
			t.Fatalf("token 4 after token 5 committed: %v, want a stale token error", err)
		}
	})
	t.Run("a plain row lock", func(t *testing.T) {
		locker, err := d.pool("locker").Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var pid int32
		if err := locker.QueryRow(context.Background(), `SELECT pg_backend_pid() FROM fencing_tokens WHERE resource = $1 FOR UPDATE`, res).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		six := goDo(newer, res, 6, insertReport(res, 6, "by 6"))
		d.waitBlocked("writer-5", pid)
		time.Sleep(300 * time.Millisecond)
		wantPending(t, six, "token 6's write behind a plain lock")
		if err := locker.Commit(context.Background()); err != nil {
			t.Fatalf("the plain locker's transaction was ended: %v", err)
		}
		if err := <-six; err != nil {
			t.Fatalf("token 6: %v", err)
		}
	})
	d.wantToken(res, 6, "node-b")
	d.wantReports(res, "by 5", "by 6")
}
