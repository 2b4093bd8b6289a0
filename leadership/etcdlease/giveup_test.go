package etcdlease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// A campaign given up while its winning transaction is on its way (etcd
// commits it; the answer comes after the campaign's context ended, as a
// pause or a drain ends it) leaves the job free: Campaign says the context
// ended, and no leader key is left on the lease of the first session, which
// goes on renewing it, for another session to wait for.
func TestACampaignGivenUpAsItsTxnWinsLeavesTheJobFree(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	ctx, giveUp := context.WithCancel(context.Background())
	var armed atomic.Bool
	a := startSession(t, lateTxnClient(t, etcd, &armed, giveUp), "a")
	b := startSession(t, etcd.Client(t), "b")
	armed.Store(true)
	if term, err := a.Campaign(ctx, "pulse"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a campaign given up as its transaction won: term %v, %v; want the context's end", term, err)
	}
	if l, ok, err := etcdlease.NewCluster(etcd.Client(t), prefix(t)).Leader(context.Background(), "pulse"); err != nil || ok {
		t.Fatalf("the leader after the campaign was given up: %+v, %v, %v; want none", l, ok, err)
	}
	if tb := mustWin(t, b, "pulse"); !tb.Valid() {
		t.Error("the other session's term is not valid")
	}
}

// lateTxnClient is a client whose transactions, once armed, go to etcd
// whatever their context, and run f once the answer is in, before the
// caller is given it: an answer that arrives after its request's context
// ended is lost to the caller (an error), as it would be in flight.
func lateTxnClient(t *testing.T, etcd *etcdtest.Cluster, armed *atomic.Bool, f func()) *clientv3.Client {
	t.Helper()
	late := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method != "/etcdserverpb.KV/Txn" || !armed.Load() {
			return invoke(ctx, method, req, reply, cc, opts...)
		}
		err := invoke(context.WithoutCancel(ctx), method, req, reply, cc, opts...)
		f()
		return errors.Join(err, ctx.Err())
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(late)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
