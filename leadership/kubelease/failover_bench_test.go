//go:build clientgo

package kubelease_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// Time from a leader's crash (its client cut off) or resignation to its
// successor's start, with the same 3 s lease duration: this backend (margin
// 1 s, renewals every 500 ms, the successor woken by watch and by its own
// timer) against client-go's leaderelection (renew deadline 2 s, retry
// period 500 ms: the successor reads the Lease every 0.5–1.1 s). The
// successor has observed the leader before the crash in both (client-go:
// its OnNewLeader). Reported as seconds per hand-over; the two alternate,
// benchRounds times:
//
//	go test -tags clientgo ./leadership/kubelease -run '^$' -bench BenchmarkHandOver -benchtime 5x
func BenchmarkHandOver(b *testing.B) {
	for range benchRounds {
		for _, kind := range []string{"crash", "resign"} {
			benchHandOver(b, kind)
		}
	}
}

func benchHandOver(b *testing.B, kind string) {
	{
		for _, impl := range []string{"kubelease", "leaderelection"} {
			b.Run(kind+"/"+impl, func(b *testing.B) {
				var total time.Duration
				for i := 0; i < b.N; i++ {
					if impl == "kubelease" {
						total += handOverKubelease(b, kind == "crash")
					} else {
						total += handOverLeaderElection(b, kind == "crash")
					}
				}
				b.ReportMetric(total.Seconds()/float64(b.N), "s/hand-over")
			})
		}
	}
}

func handOverKubelease(b *testing.B, crash bool) time.Duration {
	ns := benchNamespace(b)
	var c cut
	mk := func(name string, wrap bool) *leadership.Session {
		rc := api.Config()
		if wrap {
			rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return cutTransport{rt, &c} }
		}
		cs, err := kubetest.NewClientset(rc)
		if err != nil {
			b.Fatal(err)
		}
		s, err := kubelease.NewSession(kubelease.Config{Client: cs.CoordinationV1(), Namespace: ns, Config: leadership.Config{Instance: name, TTL: ttl, Margin: margin, RenewInterval: 500 * time.Millisecond}})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	a, f := mk("a", true), mk("b", false)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		a.Close(ctx)
		f.Close(ctx)
	}()
	ta, err := a.Campaign(context.Background(), "job")
	if err != nil {
		b.Fatal(err)
	}
	won := make(chan time.Time, 1)
	go func() {
		if _, err := f.Campaign(context.Background(), "job"); err == nil {
			won <- time.Now()
		}
	}()
	for {
		ch := f.StatsChanged()
		if f.Stats().Waiting > 0 {
			break
		}
		<-ch
	}
	began := time.Now()
	if crash {
		c.on.Store(true)
	} else if err := ta.Resign(context.Background()); err != nil {
		b.Fatal(err)
	}
	return (<-won).Sub(began)
}

func handOverLeaderElection(b *testing.B, crash bool) time.Duration {
	ns := benchNamespace(b)
	var c cut
	leading := map[string]chan time.Time{"a": make(chan time.Time, 1), "b": make(chan time.Time, 1)}
	observed := make(chan struct{}, 1)
	ctxs := map[string]context.CancelFunc{}
	for _, id := range []string{"a", "b"} {
		rc := api.Config()
		if id == "a" {
			rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return cutTransport{rt, &c} }
		}
		cs, err := kubetest.NewClientset(rc)
		if err != nil {
			b.Fatal(err)
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Name: "job", Namespace: ns}, Client: cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: id}},
			LeaseDuration: ttl, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
			ReleaseOnCancel: !crash,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { leading[id] <- time.Now() },
				OnStoppedLeading: func() {},
				OnNewLeader: func(who string) {
					if id == "b" && who == "a" {
						observed <- struct{}{}
					}
				},
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[id] = cancel
		defer cancel()
		go le.Run(ctx)
		if id == "a" {
			<-leading["a"]
		}
	}
	<-observed
	began := time.Now()
	if crash {
		c.on.Store(true)
	} else {
		ctxs["a"]() // ReleaseOnCancel: the leader clears its record
	}
	return (<-leading["b"]).Sub(began)
}
