package testenv

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// WaitKeys waits until cond holds, checking it once and again at each change
// etcd reports under prefix (a watch created before the first check, so no
// change is missed): etcd signals, the test does not poll. It fails the test
// naming what it waited for once Patience has passed.
func WaitKeys(t testing.TB, cli *clientv3.Client, prefix, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Patience)
	defer cancel()
	watch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if _, ok := <-watch; !ok {
		t.Fatalf("waiting for %s: the watch on %s closed at once (%v)", what, prefix, ctx.Err())
	}
	for !cond() {
		r, ok := <-watch
		if !ok || r.Err() != nil {
			t.Fatalf("waiting for %s: the watch on %s ended (%v, %v)", what, prefix, r.Err(), ctx.Err())
		}
	}
}
