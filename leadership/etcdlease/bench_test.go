package etcdlease_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// go test ./leadership -run '^$' -bench Valid -benchmem
func BenchmarkTermValid(b *testing.B) {
	etcd := etcdtest.Start(b, 1)
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
	etcd := etcdtest.Start(b, 1)
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
	round(b *testing.B, etcd *etcdtest.Cluster, job string, crash bool) time.Duration
}

type snipImpl struct{}

func (snipImpl) name() string { return "snip" }

func (snipImpl) round(b *testing.B, etcd *etcdtest.Cluster, job string, crash bool) time.Duration {
	leaderCli := etcd.Client(b)
	leader := startSession(b, leaderCli, job+"-leader")
	term := mustWin(b, leader, "job")
	follower := startSession(b, etcd.Client(b), job+"-follower")
	next := campaign(context.Background(), follower, "job")
	waitStats(b, follower, "the follower to wait for the leader", func(st leadership.Stats) bool { return st.Waiting == 1 })

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

func (etcdElectionImpl) round(b *testing.B, etcd *etcdtest.Cluster, job string, crash bool) time.Duration {
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

// Death of a leader whose host lives, side by side with etcd's own
// concurrency.Election, at TTL 10 s, rounds alternated in one run. b.N is the
// number of rounds of each:
//
//	go test ./leadership -run '^$' -bench DeathReclaim -benchtime 20x -timeout 30m
//
// A child process leads the job; a successor in this process campaigns for it;
// the child is SIGKILLed. For snip-jobs, this process then does what the
// supervisor does: it reaps the child and reclaims its lease, either by
// calling leadership.Reclaim (snip-dev, in-process) or by running the
// real `snip-jobs reclaim` command, built from this module (systemd's
// ExecStopPost=, which also pays for starting the binary and dialling etcd).
// concurrency.Election has nothing of the kind: its successor wins when etcd
// expires the dead child's lease. Measured from just before the SIGKILL to
// the successor's win (for snip-jobs its term's start).
func BenchmarkDeathReclaim(b *testing.B) {
	const ttl = 10 * time.Second
	etcd := etcdtest.Start(b, 1)
	bin := filepath.Join(b.TempDir(), "snip-jobs")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/snip-jobs").CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/snip-jobs: %v\n%s", err, out)
	}
	b.Run("ttl=10s", func(b *testing.B) {
		var inproc, command, election []time.Duration
		for i := 0; i < b.N; i++ {
			inproc = append(inproc, deathReclaimRound(b, etcd, fmt.Sprint("snip-", i), ttl, ""))
			command = append(command, deathReclaimRound(b, etcd, fmt.Sprint("exec-", i), ttl, bin))
			election = append(election, deathElectionRound(b, etcd, fmt.Sprint("election-", i), ttl))
		}
		reportPercentilesAs(b, "snip-", inproc)
		reportPercentilesAs(b, "snip-command-", command)
		reportPercentilesAs(b, "election-", election)
		b.ReportMetric(0, "ns/op")
	})
}

// deathReclaimRound is one snip-jobs round: with bin, the reclaim is the
// `snip-jobs reclaim` command; without, leadership.Reclaim.
func deathReclaimRound(b *testing.B, etcd *etcdtest.Cluster, job string, ttl time.Duration, bin string) time.Duration {
	child, _, _ := startChild(b, etcd.Endpoints(), job+"-leader", job, childTTLEnv+"="+ttl.String())
	follower := startSession(b, etcd.Client(b), job+"-follower", withTTL(ttl, ttl*3/10))
	next := campaign(context.Background(), follower, job)
	waitStats(b, follower, "the follower to wait for the leader", func(st leadership.Stats) bool { return st.Waiting == 1 })
	var config string
	if bin != "" {
		config = filepath.Join(b.TempDir(), "reclaim.yaml")
		yaml := fmt.Sprintf("instance: %s-leader\netcd:\n  endpoints: [%s]\n  prefix: %s\nlog:\n  format: json\njobs: []\n",
			job, strings.Join(etcd.Endpoints(), ", "), prefix(b))
		if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
			b.Fatal(err)
		}
	}

	from := time.Now()
	_ = child.Process.Kill()
	_ = child.Wait()
	if bin != "" {
		if out, err := exec.Command(bin, "reclaim", "--config", config).CombinedOutput(); err != nil {
			b.Fatalf("snip-jobs reclaim: %v\n%s", err, out)
		}
	} else if _, err := leadership.Reclaim(context.Background(), etcdlease.NewCluster(etcd.Client(b), prefix(b)), job+"-leader", ""); err != nil {
		b.Fatal(err)
	}
	won := await(b, next, "follower")
	d := won.Started().Sub(from)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = follower.Close(ctx)
	return d
}

func deathElectionRound(b *testing.B, etcd *etcdtest.Cluster, job string, ttl time.Duration) time.Duration {
	pfx := prefix(b) + "/" + job
	child, _, _ := startChild(b, etcd.Endpoints(), "leader", job, childTTLEnv+"="+ttl.String(), childImplEnv+"=election")
	fs, err := concurrency.NewSession(etcd.Client(b), concurrency.WithTTL(int(ttl/time.Second)))
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

	from := time.Now()
	_ = child.Process.Kill()
	_ = child.Wait()
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
	reportPercentilesAs(b, "", samples)
	b.ReportMetric(0, "ns/op")
}

// reportPercentilesAs reports p50, p99 (nearest rank) and max, in
// milliseconds, with unit names starting with prefix.
func reportPercentilesAs(b *testing.B, prefix string, samples []time.Duration) {
	slices.Sort(samples)
	pct := func(p float64) time.Duration { return samples[min(len(samples)-1, int(p*float64(len(samples))))] }
	b.ReportMetric(float64(pct(0.50).Milliseconds()), prefix+"p50-ms")
	b.ReportMetric(float64(pct(0.99).Milliseconds()), prefix+"p99-ms")
	b.ReportMetric(float64(samples[len(samples)-1].Milliseconds()), prefix+"max-ms")
}

// What one instance asks of etcd, holding 1, 100 and 1,000 elections on its
// one lease, counted at etcd's own /metrics over three TTLs of steady state:
// requests received (grpc_server_msg_received_total, every method), per renew
// interval; streams opened; calls ended with a code other than OK. Keep-alive
// traffic must not grow with elections, nor page anyone alerting on etcd's
// error codes.
//
//	go test ./leadership -run '^$' -bench KeepAliveTraffic -benchtime 1x
func BenchmarkKeepAliveTraffic(b *testing.B) {
	etcd := etcdtest.Start(b, 1)
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("elections=%d", n), func(b *testing.B) {
			s := startSession(b, etcd.Client(b), fmt.Sprintf("holder-%d", n))
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
			renew := s.Config().RenewInterval
			time.Sleep(3 * testTTL) // warm-up: each term's watch is created meanwhile
			for i := 0; i < b.N; i++ {
				window := 3 * testTTL
				before := etcd.Metrics(b, 0)
				time.Sleep(window)
				d := etcd.Metrics(b, 0).Minus(before)
				reqs := d.Sum("grpc_server_msg_received_total")
				b.ReportMetric(reqs/window.Seconds(), "etcd-req/s")
				b.ReportMetric(reqs/(float64(window)/float64(renew)), "req/renew-interval")
				b.ReportMetric(d.Sum("grpc_server_started_total"), "streams-opened")
				b.ReportMetric(d.NotOK(), "non-OK")
			}
			b.ReportMetric(0, "ns/op")
			st := s.Stats()
			if st.LeaseEnds[leadership.ReasonExpired] != 0 {
				b.Fatalf("the lease expired while holding %d elections", n)
			}
		})
	}
}
