package etcdlease_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// WatchInstances reports the instances that are up as they come and go:
// once at the start, then at each registration and each end of one (a
// session closed, a registration deleted).
func TestWatchInstancesFollowsInstancesComingAndGoing(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	a := startSession(t, etcd.Client(t), "server-a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan []string, 16)
	go a.WatchInstances(ctx, func(names []string) { seen <- names })

	want := func(what string, names ...string) {
		t.Helper()
		for {
			select {
			case got := <-seen:
				if slices.Equal(got, names) {
					return
				}
			case <-time.After(patience):
				t.Fatalf("%s: instances %v never reported", what, names)
			}
		}
	}
	want("at the start", "server-a")
	b := startSession(t, etcd.Client(t), "server-b")
	want("server-b registered", "server-a", "server-b")
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want("server-b closed", "server-a")
	c := startSession(t, etcd.Client(t), "server-c")
	want("server-c registered", "server-a", "server-c")
	if err := c.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	want("server-c deregistered", "server-a")
}
