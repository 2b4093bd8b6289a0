package leadership

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// kaStream is the session's one long-lived keep-alive stream, kept across
// keep-alives and leases, and opened again after any failure.
// clientv3's KeepAliveOnce opens a stream per call, and with etcd
// authentication clientv3 logs in for every new stream: a bcrypt check and a
// raft round on the server (about 100 ms of an etcd member's time here,
// against half a millisecond for a read), for every keep-alive of every
// instance. A stream answers requests in order and the session has one in
// flight at a time, so the next answer is the one to the request just sent,
// and its send time stays known.
type kaStream struct {
	stream pb.Lease_LeaseKeepAliveClient
	cancel context.CancelFunc
}

// keepAliveOnce renews lease id once through the stream, within ctx. A
// request not answered within ctx tears the stream down (ending every wait
// on it: opening, logging in, sending, receiving), so a stale answer is
// never read as the next one's. An answer with TTL 0 means etcd no longer
// has the lease (rpctypes.ErrLeaseNotFound), as from KeepAliveOnce.
func (s *Session) keepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*pb.LeaseKeepAliveResponse, error) {
	ka := &s.ka
	if ka.stream == nil {
		sctx, cancel := context.WithCancel(context.Background())
		stop := context.AfterFunc(ctx, cancel)
		stream, err := pb.NewLeaseClient(s.cfg.Client.ActiveConnection()).LeaseKeepAlive(sctx)
		if !stop() || err != nil {
			cancel()
			return nil, s.kaErr(ctx, err)
		}
		ka.stream, ka.cancel = stream, cancel
	}
	stop := context.AfterFunc(ctx, ka.cancel)
	err := ka.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)})
	var resp *pb.LeaseKeepAliveResponse
	if err == nil {
		resp, err = ka.stream.Recv()
	}
	if !stop() || err != nil {
		ka.close()
		return nil, s.kaErr(ctx, err)
	}
	if resp.TTL <= 0 {
		return nil, rpctypes.ErrLeaseNotFound
	}
	return resp, nil
}

// kaErr is the error of a failed keep-alive: ctx's when it ended, else
// etcd's error as clientv3 would return it.
func (s *Session) kaErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return rpctypes.Error(err)
}

func (ka *kaStream) close() {
	if ka.cancel != nil {
		ka.cancel()
	}
	ka.stream, ka.cancel = nil, nil
}
