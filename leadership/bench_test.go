package leadership_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/snip/snip-jobs/internal/testenv"
	"github.com/snip/snip-jobs/leadership"
)

// go test ./leadership -run '^$' -bench Valid -benchmem
func BenchmarkTermValid(b *testing.B) {
	etcd := testenv.StartEtcd(b, 1)
	s := startSession(b, etcd.Client(b), "bench")
	term := mustWin(b, s, "job")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if !term.Valid() {
			b.Fatal("term ended during the benchmark")
		}
	}
}

// Failover side by side with etcd's own concurrency.Election on one cluster, in
// one run, both with a 2 s TTL. b.N is the number of rounds:
//
//	go test ./leadership -run '^$' -bench Failover -benchtime 20x
//
// crash: the leader's client is closed right after one of its keep-alives was
// answered (no further keep-alive, no revoke); measured from that keep-alive (for
// snip-jobs its send time, for concurrency.Election the time its answer was
// received, which flatters etcd by one round trip) to the successor's win.
// resign: from just before Resign to the successor's win.
func BenchmarkFailover(b *testing.B) {
	etcd := testenv.StartEtcd(b, 1)
	for _, impl := range []failoverImpl{snipImpl{}, etcdElectionImpl{}} {
		for _, kind := range []string{"crash", "resign"} {
			b.Run(impl.name()+"/"+kind, func(b *testing.B) {
				var samples []time.Duration
				for i := 0; i < b.N; i++ {
					samples = append(samples, impl.round(b, etcd, fmt.Sprintf("%s-%s-%d", impl.name(), kind, i), kind == "crash"))
				}
				reportPercentiles(b, samples)
			})
		}
	}
}

// settle lets a follower's watch be established before a resign is timed, so
// that neither implementation is charged for its follower's set-up.
const settle = 200 * time.Millisecond

type failoverImpl interface {
	name() string
	// round elects a leader, starts a waiting successor, crashes or resigns the
	// leader, and returns the time from the reference instant to the successor's win.
	round(b *testing.B, etcd *testenv.EtcdCluster, job string, crash bool) time.Duration
}

type snipImpl struct{}

func (snipImpl) name() string { return "snip" }

func (snipImpl) round(b *testing.B, etcd *testenv.EtcdCluster, job string, crash bool) time.Duration {
	leaderCli := etcd.Client(b)
	leader := startSession(b, leaderCli, job+"-leader")
	term := mustWin(b, leader, "job")
	follower := startSession(b, etcd.Client(b), job+"-follower")
	next := campaign(context.Background(), follower, "job")
	eventually(b, "the follower to wait for the leader", func() bool { return follower.Stats().Waiting == 1 })

	var from time.Time
	if crash {
		// Crash right after a keep-alive was answered.
		last := leader.Stats().LastRenewal
		spinUntil(func() bool { return !leader.Stats().LastRenewal.Equal(last) })
		from = leader.Stats().LastRenewal
		_ = leaderCli.Close()
	} else {
		time.Sleep(settle)
		from = time.Now()
		if err := term.Resign(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	won := await(b, next, "follower")
	d := won.Started().Sub(from)
	_ = won.Resign(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = follower.Close(ctx)
	_ = leader.Close(ctx)
	return d
}

type etcdElectionImpl struct{}

func (etcdElectionImpl) name() string { return "etcd-election" }

// observedLease records when each keep-alive answer reaches the client.
type observedLease struct {
	clientv3.Lease
	last atomic.Pointer[time.Time]
}

func (o *observedLease) KeepAlive(ctx context.Context, id clientv3.LeaseID) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	in, err := o.Lease.KeepAlive(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make(chan *clientv3.LeaseKeepAliveResponse)
	go func() {
		defer close(out)
		for r := range in {
			now := time.Now()
			o.last.Store(&now)
			out <- r
		}
	}()
	return out, nil
}

func (etcdElectionImpl) round(b *testing.B, etcd *testenv.EtcdCluster, job string, crash bool) time.Duration {
	pfx := prefix(b) + "/" + job
	leaderCli := etcd.Client(b)
	obs := &observedLease{Lease: leaderCli.Lease}
	leaderCli.Lease = obs
	ls, err := concurrency.NewSession(leaderCli, concurrency.WithTTL(int(testTTL/time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	le := concurrency.NewElection(ls, pfx)
	if err := le.Campaign(context.Background(), "leader"); err != nil {
		b.Fatal(err)
	}
	fs, err := concurrency.NewSession(etcd.Client(b), concurrency.WithTTL(int(testTTL/time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	defer fs.Close()
	fe := concurrency.NewElection(fs, pfx)
	wonAt := make(chan time.Time, 1)
	go func() {
		if err := fe.Campaign(context.Background(), "follower"); err != nil {
			b.Error(err)
		}
		wonAt <- time.Now()
	}()
	waitCampaigning(b, etcd.Client(b), pfx)

	var from time.Time
	if crash {
		first := obs.last.Load()
		spinUntil(func() bool { return obs.last.Load() != first })
		from = *obs.last.Load()
		_ = leaderCli.Close()
	} else {
		time.Sleep(settle)
		from = time.Now()
		if err := le.Resign(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer ls.Close()
	}
	d := (<-wonAt).Sub(from)
	_ = fe.Resign(context.Background())
	return d
}

// spinUntil polls cond every millisecond: finer than eventually, so that a
// crash follows the keep-alive it is timed from by at most a millisecond.
func spinUntil(cond func() bool) {
	for !cond() {
		time.Sleep(time.Millisecond)
	}
}

// waitCampaigning waits until the follower's campaign is waiting for the
// leader to go: for concurrency.Election, until its key exists under the prefix.
func waitCampaigning(b *testing.B, cli *clientv3.Client, pfx string) {
	b.Helper()
	eventually(b, "the follower to campaign", func() bool {
		r, err := cli.Get(context.Background(), pfx+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && r.Count >= 2
	})
}

func reportPercentiles(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	pct := func(p float64) time.Duration { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
	b.ReportMetric(float64(pct(0.50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(pct(0.99).Milliseconds()), "p99-ms")
	b.ReportMetric(float64(samples[len(samples)-1].Milliseconds()), "max-ms")
	b.ReportMetric(0, "ns/op")
}

// etcd requests per second from one instance holding 1, 100 and 1,000
// elections on its one lease, counted by a gRPC interceptor on its client over
// three TTLs of steady state: unary requests and messages sent on streams
// (etcd-req/s), and streams opened (streams/s; with etcd's authentication on,
// clientv3 logs in for each). Keep-alive traffic must not grow with
// elections.
//
//	go test ./leadership -run '^$' -bench KeepAliveTraffic -benchtime 1x
func BenchmarkKeepAliveTraffic(b *testing.B) {
	etcd := testenv.StartEtcd(b, 1)
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("elections=%d", n), func(b *testing.B) {
			var rpcs, streams atomic.Int64
			cli, err := clientv3.New(clientv3.Config{
				Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
				DialOptions: []grpc.DialOption{
					grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
						rpcs.Add(1)
						return invoker(ctx, method, req, reply, cc, opts...)
					}),
					grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
						streams.Add(1)
						cs, err := streamer(ctx, desc, cc, method, opts...)
						if err != nil {
							return nil, err
						}
						return countingStream{cs, &rpcs}, nil
					}),
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer cli.Close()
			s := startSession(b, cli, fmt.Sprintf("holder-%d", n))
			var wg sync.WaitGroup
			sem := make(chan struct{}, 32)
			for j := range n {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					mustWin(b, s, fmt.Sprintf("job-%d", j))
				}()
			}
			wg.Wait()
			// Steady state: each term's watch is created after its win, one
			// create message at a time on the watch stream.
			time.Sleep(3 * testTTL)
			for i := 0; i < b.N; i++ {
				window := 3 * testTTL
				start, opened := rpcs.Load(), streams.Load()
				time.Sleep(window)
				b.ReportMetric(float64(rpcs.Load()-start)/window.Seconds(), "etcd-req/s")
				b.ReportMetric(float64(streams.Load()-opened)/window.Seconds(), "streams/s")
			}
			b.ReportMetric(0, "ns/op")
			st := s.Stats()
			if st.LeaseEnds[leadership.ReasonExpired] != 0 {
				b.Fatalf("the lease expired while holding %d elections", n)
			}
		})
	}
}

// countingStream counts the messages sent on a client stream.
type countingStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s countingStream) SendMsg(m any) error {
	s.n.Add(1)
	return s.ClientStream.SendMsg(m)
}
