package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// WaitKeys waits until cond holds, checking it once and again at each change
// etcd reports under prefix (a watch created before the first check, so no
// change is missed): etcd signals, the test does not poll. A watch etcd
// cancels (a member may, with auth on) is opened again and cond checked
// anew. It fails the test naming what it waited for once benchtest.Patience has
// passed.
func WaitKeys(t testing.TB, cli *clientv3.Client, prefix, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	for ctx.Err() == nil {
		if waitKeysOnce(ctx, cli, prefix, cond) {
			return
		}
		sleep.For(ctx, 50*time.Millisecond) // not a poll of cond: a pause before watching again
	}
	t.Fatalf("waiting for %s: no change under %s made it hold within %v", what, prefix, benchtest.Patience)
}

// waitKeysOnce waits on one watch; false if the watch ended first.
func waitKeysOnce(ctx context.Context, cli *clientv3.Client, prefix string, cond func() bool) bool {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	watch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if r, ok := <-watch; !ok || r.Err() != nil {
		return false
	}
	for !cond() {
		if r, ok := <-watch; !ok || r.Err() != nil {
			return false
		}
	}
	return true
}
