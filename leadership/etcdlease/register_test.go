package etcdlease_test

import (
	"context"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// A registration whose answer is lost (etcd wrote it, as during an etcd
// leader election) and whose lease's revoke then fails too is left in etcd
// under a lease the session never opened. The session's next lease finds it
// and takes it over as its own: it is not another live process of this
// host, and the instance does not stop as its own duplicate (found by the
// chaos run, on etcd 3.5.23 during an etcd leader loss).
func TestARegistrationWhoseAnswerWasLostIsTheSessionsOwn(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	// 0: the registration's answer is to be lost; 1: every revoke fails (the
	// client retries them) until the next lease is granted; 2: no more faults.
	var stage atomic.Int32
	loseAnswers := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch {
		case method == "/etcdserverpb.KV/Txn" && stage.Load() == 0:
			if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
				return err
			}
			stage.Store(1)
			return status.Error(codes.Unavailable, "test: the answer was lost")
		case method == "/etcdserverpb.Lease/LeaseRevoke" && stage.Load() == 1:
			return status.Error(codes.Unavailable, "test: the revoke did not reach etcd")
		case method == "/etcdserverpb.Lease/LeaseGrant":
			stage.CompareAndSwap(1, 2)
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: etcd.Endpoints(), Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(loseAnswers)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })

	s := startSession(t, cli, "server-a") // fails the test if the session stops
	if got := stage.Load(); got != 2 {
		t.Fatalf("the faults were not all injected (stage %d): the test proves nothing", got)
	}
	mustWin(t, s, "aggregator")
	if got := s.Stats().Reclaimed; got != 0 {
		t.Errorf("reclaimed %d predecessor leases; the stray registration was this session's own", got)
	}
}
