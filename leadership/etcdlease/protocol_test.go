package etcdlease_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// ClusterLoad counts the terms each instance that is up leads; an instance
// that has deregistered (shutting down) is no longer counted, though its
// terms go on until it resigns them.
func TestClusterLoadCountsTheTermsOfEachInstanceThatIsUp(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	// Not about expiry: leases that outlast an etcd slow to answer under
	// load (testTTL's lapsed, and the terms with them, at -p=4).
	long := withTTL(10*time.Second, 3*time.Second)
	a := startSession(t, etcd.Client(t), "server-a", long)
	b := startSession(t, etcd.Client(t), "server-b", long)
	mustWin(t, a, "one")
	mustWin(t, a, "two")
	mustWin(t, b, "three")
	load := func() map[string]int {
		t.Helper()
		l, err := a.ClusterLoad(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if got, want := load(), map[string]int{"server-a": 2, "server-b": 1}; !maps.Equal(got, want) {
		t.Errorf("load %v, want %v", got, want)
	}
	if err := b.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := load(), map[string]int{"server-a": 2}; !maps.Equal(got, want) {
		t.Errorf("load after server-b deregistered %v, want %v", got, want)
	}
}

// An operator's resign request reaches the leader's session with the
// leader's token; once that term is resigned and another instance wins,
// RequestResign returns both leaders. A job without a leader is refused.
func TestAResignRequestNamesTheLeadersTokenAndWaitsForTheHandOver(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	// Not about expiry: leases that outlast an etcd slow to answer under
	// load (at -p=4 server-a's term lapsed, and server-b's was asked to resign).
	long := withTTL(10*time.Second, 3*time.Second)
	a := startSession(t, etcd.Client(t), "server-a", long)
	b := startSession(t, etcd.Client(t), "server-b", long)
	term := mustWin(t, a, "report")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	waiting := campaign(ctx, b, "report")

	type request struct {
		job   string
		token int64
	}
	requests := make(chan request, 4)
	go a.WatchResignRequests(ctx, func(job string, token int64) { requests <- request{job, token} })
	// A request for another job, put until one arrives, shows the watch is live.
	for live := false; !live; {
		if _, err := cli.Put(ctx, layout.ResignKey(prefix(t), "probe"), "1"); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-requests:
			live = r == request{"probe", 1}
		case <-time.After(100 * time.Millisecond):
		}
	}

	type result struct {
		before leadership.Leader
		after  *leadership.Leader
		err    error
	}
	done := make(chan result, 1)
	go func() {
		before, after, err := leadership.Resign(ctx, etcdlease.NewCluster(cli, prefix(t)), "report")
		done <- result{before, after, err}
	}()
	for got := false; !got; {
		select {
		case r := <-requests:
			if r.job == "probe" {
				continue // a later probe's, put before the first arrived
			}
			if r != (request{"report", term.Token()}) {
				t.Fatalf("request %+v, want report with token %d", r, term.Token())
			}
			got = true
		case <-ctx.Done():
			t.Fatal("no resign request reached the leader's session")
		}
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next := await(t, waiting, "server-b")
	r := <-done
	if r.err != nil || r.before.Token != term.Token() || r.after == nil || r.after.Instance != "server-b" || r.after.Token != next.Token() {
		t.Fatalf("RequestResign: before %+v, after %+v, err %v; want %d then server-b's %d", r.before, r.after, r.err, term.Token(), next.Token())
	}
	if _, _, err := leadership.Resign(ctx, etcdlease.NewCluster(cli, prefix(t)), "no-such-job"); !errors.Is(err, leadership.ErrNoLeader) {
		t.Errorf("resign of a job without a leader: %v, want %v", err, leadership.ErrNoLeader)
	}
	if got, want := layout.ResignKey(prefix(t)+"/", "report"), prefix(t)+"/resign/report"; got != want {
		t.Errorf("ResignKey %q, want %q", got, want)
	}
}
