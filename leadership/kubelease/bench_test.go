//go:build clientgo

package kubelease_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// Steady-state traffic at the API server, counted by the API server itself
// (apiserver_request_total for resource leases, by verb), while one process
// leads 1 or 100 jobs and a second waits for each of them: this backend
// (one instance Lease per process, renewed every 2 s; the follower watches)
// against client-go's leaderelection with its defaults (15 s / 10 s / 2 s: the
// leader renews each job's Lease every 2 s, the follower reads each every
// 2 s), and the same window with neither (the API server's own lease
// heartbeats). Each iteration is one second of the window; the three
// alternate, benchRounds times:
//
//	go test -tags clientgo ./leadership/kubelease -run '^$' -bench BenchmarkSteadyStateLeaseTraffic -benchtime 20x
func BenchmarkSteadyStateLeaseTraffic(b *testing.B) {
	for range benchRounds {
		for _, jobs := range []int{1, 100} {
			for _, mode := range []string{"idle", "kubelease", "leaderelection"} {
				benchTraffic(b, mode, jobs)
			}
		}
	}
}

const benchRounds = 3

func benchTraffic(b *testing.B, mode string, jobs int) {
	{
		b.Run(fmt.Sprintf("%s/jobs=%d", mode, jobs), func(b *testing.B) {
			ns := benchNamespace(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			switch mode {
			case "kubelease":
				stop := benchKubelease(b, ns, jobs)
				defer stop()
			case "leaderelection":
				stop := benchLeaderElection(ctx, b, ns, jobs)
				defer stop()
			}
			hc, err := api.HTTPClient()
			if err != nil {
				b.Fatal(err)
			}
			before, err := benchtest.ScrapeMetricsWith(ctx, hc, api.URL())
			if err != nil {
				b.Fatal(err)
			}
			began := time.Now()
			for b.Loop() {
				time.Sleep(time.Second) // the measurement window, not a wait for a condition
			}
			after, err := benchtest.ScrapeMetricsWith(ctx, hc, api.URL())
			if err != nil {
				b.Fatal(err)
			}
			secs := time.Since(began).Seconds()
			d := after.Minus(before)
			for _, verb := range []string{"PUT", "GET", "POST", "LIST", "WATCH"} {
				b.ReportMetric(d.Sum("apiserver_request_total", `resource="leases"`, `verb="`+verb+`"`)/secs, verb+"/s")
			}
		})
	}
}

var benchSeq atomic.Int64

func benchNamespace(b *testing.B) string {
	cs, err := kubetest.NewClientset(api.Config())
	if err != nil {
		b.Fatal(err)
	}
	name := fmt.Sprintf("bench-%d", benchSeq.Add(1))
	_, err = cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return name
}

// benchKubelease starts a leader of every job and a follower waiting for each.
func benchKubelease(b *testing.B, ns string, benchJobs int) (stop func()) {
	var sessions []*leadership.Session
	for _, name := range []string{"leader", "follower"} {
		cs, err := kubetest.NewClientset(api.Config())
		if err != nil {
			b.Fatal(err)
		}
		s, err := kubelease.NewSession(kubelease.Config{Client: cs.CoordinationV1(), Namespace: ns, Config: leadership.Config{Instance: name, TTL: 15 * time.Second, Margin: 5 * time.Second, RenewInterval: 2 * time.Second}})
		if err != nil {
			b.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	leader, follower := sessions[0], sessions[1]
	for i := range benchJobs {
		if _, err := leader.Campaign(ctx, fmt.Sprintf("job-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	for i := range benchJobs {
		go follower.Campaign(ctx, fmt.Sprintf("job-%d", i))
	}
	benchtest.WaitChange(b, "the follower waiting for every job", follower.StatsChanged,
		func() bool { return follower.Stats().Waiting == int64(benchJobs) })
	return func() {
		cancel()
		for _, s := range sessions {
			s.Close(context.Background())
		}
	}
}

// benchLeaderElection starts client-go electors with its defaults: a leader
// of every job, then a follower for each. stop ends them and waits until
// they have returned (the leaders' releases done), so that their last
// requests do not fall into the next benchmark's window.
func benchLeaderElection(ctx context.Context, b *testing.B, ns string, benchJobs int) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	leading := make(chan struct{}, benchJobs)
	for _, id := range []string{"leader", "follower"} {
		// Without client-go's default rate limit (5/s, burst 10), which 100
		// electors renewing every 2 s would exceed: api.Config() has none,
		// as kubelease requires.
		cs, err := kubetest.NewClientset(api.Config())
		if err != nil {
			b.Fatal(err)
		}
		for i := range benchJobs {
			lock := &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("le-job-%d", i), Namespace: ns},
				Client:     cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: id},
			}
			le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
				ReleaseOnCancel: true,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) { leading <- struct{}{} },
					OnStoppedLeading: func() {},
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() { le.Run(ctx) })
		}
		if id == "leader" {
			for range benchJobs {
				<-leading
			}
		}
	}
	return func() {
		cancel()
		wg.Wait()
	}
}
