package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/snip/snip-jobs/testbench/freeport"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdBound bounds every wait on a condition in these tests. It is generous:
// it only decides how long a broken run takes to fail.
const etcdBound = 30 * time.Second

// etcdEventually calls f until it returns nil, failing the test with f's
// last error when that does not happen within etcdBound. It returns the
// number of calls.
func etcdEventually(t *testing.T, what string, f func() error) int {
	t.Helper()
	deadline := time.Now().Add(etcdBound)
	for n := 1; ; n++ {
		err := f()
		if err == nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v (%d attempts): %v", what, etcdBound, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// etcdPut puts key=val with a context bounded by d.
func etcdPut(cli *clientv3.Client, d time.Duration, key, val string) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := cli.Put(ctx, key, val)
	return err
}

// etcdGet returns key's value (linearizable read) with a context bounded by d.
func etcdGet(cli *clientv3.Client, d time.Duration, key string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) != 1 {
		return "", fmt.Errorf("get %q: %d keys", key, len(resp.Kvs))
	}
	return string(resp.Kvs[0].Value), nil
}

func etcdMustGet(t *testing.T, cli *clientv3.Client, key, want string) {
	t.Helper()
	got, err := etcdGet(cli, 10*time.Second, key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	if got != want {
		t.Fatalf("get %q = %q, want %q", key, got, want)
	}
}

func TestEtcdSingleMember(t *testing.T) {
	t.Parallel()
	c := Start(t, 1)
	if got := c.LeaderIndex(t); got != 0 {
		t.Fatalf("LeaderIndex = %d, want 0", got)
	}
	if !c.Running(0) {
		t.Fatal("Running(0) = false after Start")
	}
	if eps := c.Endpoints(); len(eps) != 1 || eps[0] != c.Endpoint(0) {
		t.Fatalf("Endpoints() = %v, Endpoint(0) = %q", eps, c.Endpoint(0))
	}

	cli := c.Client(t)
	if err := etcdPut(cli, 10*time.Second, "k", "v1"); err != nil {
		t.Fatalf("put: %v", err)
	}
	etcdMustGet(t, cli, "k", "v1")

	// The member keeps its data across Stop and Restart.
	c.Stop(t, 0)
	if c.Running(0) {
		t.Fatal("Running(0) = true after Stop")
	}
	c.Restart(t, 0)
	if !c.Running(0) {
		t.Fatal("Running(0) = false after Restart")
	}
	cli2 := c.Client(t)
	etcdMustGet(t, cli2, "k", "v1")

	// Closing a client before its Cleanup does (a simulated crash) is harmless.
	if err := cli2.Close(); err != nil {
		t.Logf("first Close: %v", err)
	}
}

func TestEtcdLeaderStopAndRestart(t *testing.T) {
	t.Parallel()
	c := Start(t, 3)
	cli := c.Client(t)
	if err := etcdPut(cli, 10*time.Second, "before", "1"); err != nil {
		t.Fatalf("put before stop: %v", err)
	}

	old := c.LeaderIndex(t)
	c.Stop(t, old)
	if c.Running(old) {
		t.Fatalf("Running(%d) = true after Stop", old)
	}

	// The two other members still form a quorum: a client on them writes.
	var others []string
	for i := range c.Size() {
		if i != old {
			others = append(others, c.Endpoint(i))
		}
	}
	if err := etcdPut(c.Client(t, others...), 10*time.Second, "during", "2"); err != nil {
		t.Fatalf("put with leader %d stopped, via %v: %v", old, others, err)
	}
	// A client on all three endpoints gets there too (its connection to the
	// stopped member fails and it uses the others).
	etcdEventually(t, "put via all endpoints with the leader stopped", func() error {
		return etcdPut(cli, 2*time.Second, "during-all", "3")
	})

	now := c.LeaderIndex(t)
	if now == old {
		t.Fatalf("LeaderIndex = %d after stopping the leader %d", now, old)
	}

	// The stopped member comes back with its identity and catches up: a
	// linearizable read served through it returns what was written while it
	// was down.
	c.Restart(t, old)
	if !c.Running(old) {
		t.Fatalf("Running(%d) = false after Restart", old)
	}
	only := c.Client(t, c.Endpoint(old))
	etcdMustGet(t, only, "during", "2")
	etcdMustGet(t, only, "before", "1")
	if got := c.LeaderIndex(t); got < 0 || got >= c.Size() {
		t.Fatalf("LeaderIndex = %d", got)
	}
}

func TestEtcdNoQuorum(t *testing.T) {
	t.Parallel()
	c := Start(t, 3)
	cli := c.Client(t, c.Endpoint(2))
	if err := etcdPut(cli, 10*time.Second, "k", "1"); err != nil {
		t.Fatalf("put with all members up: %v", err)
	}

	c.Stop(t, 0)
	c.Stop(t, 1)
	// One member of three cannot commit anything.
	err := etcdPut(cli, time.Second, "k", "2")
	if err == nil {
		t.Fatal("put with 2 of 3 members stopped succeeded")
	}
	t.Logf("put without quorum: %v", err)

	c.Restart(t, 1)
	if err := etcdPut(cli, 10*time.Second, "k", "3"); err != nil {
		t.Fatalf("put after restarting member 1: %v", err)
	}
	etcdMustGet(t, c.Client(t, c.Endpoint(1)), "k", "3")
}

func TestEtcdProxyBlackhole(t *testing.T) {
	t.Parallel()
	c := Start(t, 1)
	p := c.Proxy(t, 0)
	cli := c.Client(t, p.Endpoint())

	// This opens the client's connection through the proxy.
	if err := etcdPut(cli, 10*time.Second, "k", "1"); err != nil {
		t.Fatalf("put through proxy: %v", err)
	}
	etcdMustGet(t, cli, "k", "1")

	// Blackholing holds the bytes of the connection that is already open.
	// The held put is of another key: delivered late, after the heal, it may
	// land after a newer write on another connection, as on a real network.
	p.Blackhole()
	err := etcdPut(cli, 500*time.Millisecond, "held", "2")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put through blackholed proxy: err = %v, want context deadline exceeded", err)
	}
	_, err = etcdGet(cli, 500*time.Millisecond, "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get through blackholed proxy: err = %v, want context deadline exceeded", err)
	}
	// The member itself is fine.
	etcdMustGet(t, c.Client(t, c.Endpoint(0)), "k", "1")

	p.Unblackhole()
	n := etcdEventually(t, "put after Unblackhole", func() error {
		return etcdPut(cli, 2*time.Second, "k", "3")
	})
	t.Logf("put through the proxy succeeded again on attempt %d", n)
	etcdMustGet(t, cli, "k", "3")
}

func TestEtcdProxyDelay(t *testing.T) {
	t.Parallel()
	c := Start(t, 1)
	p := c.Proxy(t, 0)
	cli := c.Client(t, p.Endpoint())
	if err := etcdPut(cli, 10*time.Second, "k", "1"); err != nil {
		t.Fatalf("put through proxy: %v", err)
	}

	// Each direction holds data for 300 ms, so a request cannot be answered
	// within 100 ms, whatever the machine's speed.
	p.Delay(300 * time.Millisecond)
	_, err := etcdGet(cli, 100*time.Millisecond, "k")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get through delayed proxy: err = %v, want context deadline exceeded", err)
	}
	// A patient request gets through.
	etcdMustGet(t, cli, "k", "1")

	p.Undelay()
	etcdEventually(t, "get after Undelay", func() error {
		_, err := etcdGet(cli, 2*time.Second, "k")
		return err
	})
}

func TestEtcdProxyToStoppedMember(t *testing.T) {
	t.Parallel()
	// A 3-member cluster so that stopping one member leaves a quorum.
	c := Start(t, 3)
	p := c.Proxy(t, 0)
	cli := c.Client(t, p.Endpoint())
	if err := etcdPut(cli, 10*time.Second, "k", "1"); err != nil {
		t.Fatalf("put through proxy: %v", err)
	}
	c.Stop(t, 0)
	err := etcdPut(cli, time.Second, "k", "2")
	if err == nil {
		t.Fatal("put through a proxy to a stopped member succeeded")
	}
	t.Logf("put through a proxy to a stopped member: %v", err)
	c.Restart(t, 0)
	etcdEventually(t, "put through proxy after Restart", func() error {
		return etcdPut(cli, 2*time.Second, "k", "3")
	})
}

func TestEtcdKillLeader(t *testing.T) {
	t.Parallel()
	c := Start(t, 3)
	old := c.LeaderIndex(t)
	c.Kill(t, old)
	if c.Running(old) {
		t.Fatalf("Running(%d) = true after Kill", old)
	}
	// Without a handoff the others elect a leader after the election timeout.
	if now := c.LeaderIndex(t); now == old {
		t.Fatalf("LeaderIndex = %d after killing the leader %d", now, old)
	}
	cli := c.Client(t)
	etcdEventually(t, "put with the leader killed", func() error {
		return etcdPut(cli, 2*time.Second, "k", "1")
	})
	c.Restart(t, old)
	etcdMustGet(t, c.Client(t, c.Endpoint(old)), "k", "1")
}

// Stopping a member cuts its client streams; a client on all endpoints
// carries its watch and lease keep-alive over to another member.
func TestEtcdStopMovesStreams(t *testing.T) {
	t.Parallel()
	c := Start(t, 3)
	cli := c.Client(t)
	writer := c.Client(t)

	lease, err := cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	kctx, kcancel := context.WithCancel(context.Background())
	defer kcancel()
	if _, err := cli.KeepAlive(kctx, lease.ID); err != nil {
		t.Fatalf("keepalive: %v", err)
	}
	// Not WithRequireLeader: such a watch ends with "etcdserver: no leader"
	// when it moves to another member while leadership changes hands.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	wch := cli.Watch(wctx, "w")

	// Stop each member in turn, so that one of the stops hits the member
	// that serves the client's streams.
	for i := range c.Size() {
		start := time.Now()
		c.Stop(t, i)
		t.Logf("Stop(%d) took %v", i, time.Since(start))
		val := fmt.Sprint(i)
		etcdEventually(t, "put with a member stopped", func() error {
			return etcdPut(writer, 2*time.Second, "w", val)
		})
		select {
		case resp, ok := <-wch:
			if !ok || resp.Err() != nil {
				t.Fatalf("watch ended after Stop(%d): closed=%v err=%v", i, !ok, resp.Err())
			}
			if got := string(resp.Events[len(resp.Events)-1].Kv.Value); got != val {
				t.Fatalf("watch event after Stop(%d): value %q, want %q", i, got, val)
			}
		case <-time.After(etcdBound):
			t.Fatalf("no watch event within %v after Stop(%d)", etcdBound, i)
		}
		c.Restart(t, i)
	}
	ttl, err := cli.TimeToLive(context.Background(), lease.ID)
	if err != nil {
		t.Fatalf("lease time-to-live: %v", err)
	}
	if ttl.TTL <= 0 {
		t.Fatalf("lease expired while the members were stopped in turn: TTL %d", ttl.TTL)
	}
}

// BenchmarkEtcdPut measures a Put on a running cluster; it also shows that
// the helpers work with a *testing.B.
func BenchmarkEtcdPut(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			c := Start(b, n)
			cli := c.Client(b)
			ctx := context.Background()
			for b.Loop() {
				if _, err := cli.Put(ctx, "bench", "v"); err != nil {
					b.Fatalf("put: %v", err)
				}
			}
		})
	}
}

// A member's client and peer ports lie below the kernel's ephemeral range:
// while it is stopped, no outgoing connection can be given one as its source
// port and keep its Restart from binding it.
func TestEtcdPortsLieBelowTheEphemeralRange(t *testing.T) {
	c := Start(t, 1)
	m := c.member(0)
	for _, u := range []string{m.clientURL.Port(), m.peerURL.Port()} {
		port, err := strconv.Atoi(u)
		if err != nil {
			t.Fatal(err)
		}
		if port < freeport.Low || port >= freeport.EphemeralStart() {
			t.Errorf("member port %d is outside [%d, %d)", port, freeport.Low, freeport.EphemeralStart())
		}
	}
}
