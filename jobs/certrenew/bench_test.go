package certrenew_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/snip/snip-jobs/jobs/certrenew"
)

// BenchmarkIssue200Domains issues certificates for 200 new domains in one
// pass against Pebble (PEBBLE_VA_NOSLEEP, no bad nonces), with one worker and
// with four, in the same run, and logs the speed-up. Everything is real:
// lego, Pebble's VA fetching every token over HTTP from an instance's
// challenge handler (through the front door), PostgreSQL for every fenced
// write and every token lookup.
//
//	sync:      the CA answers a challenge POST once validation is done
//	lego-poll: Pebble's own answer ("processing") with Retry-After: 1, so lego
//	           sleeps about a second per order before looking again
//
// Run: go test ./jobs/certrenew -run '^$' -bench Issue200 -benchtime 1x
func BenchmarkIssue200Domains(b *testing.B) {
	const n = 200
	for _, mode := range []struct {
		name  string
		async bool
	}{{"sync", false}, {"lego-poll", true}} {
		b.Run(mode.name, func(b *testing.B) {
			took := map[int]time.Duration{}
			ks := []int{1, 4}
			if !mode.async {
				ks = append(ks, 8) // where it stops scaling on this machine
			}
			for _, workers := range ks {
				b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
					var total time.Duration
					for range b.N {
						b.StopTimer()
						c := newCluster(b, clusterOptions{
							quiet: true,
							ca:    caOptions{nonceReject: "0", asyncChall: mode.async},
							options: func(o *certrenew.Options) {
								o.Concurrency = workers
								o.LockDelay = 0
							},
						})
						domains := make([]string, n)
						for i := range domains {
							domains[i] = fmt.Sprintf("d%03d.bench.test", i)
						}
						c.addDomains("active", domains...)
						leader := c.lead("a", 10)
						b.StartTimer()
						start := time.Now()
						leader.mustPass()
						total += time.Since(start)
						b.StopTimer()
						if got := c.int(`SELECT count(*) FROM certrenew_certificates WHERE current`); got != n {
							b.Fatalf("%d certificates issued, want %d", got, n)
						}
					}
					took[workers] = total / time.Duration(b.N)
					b.ReportMetric(float64(n)/took[workers].Seconds(), "certs/s")
				})
			}
			for _, k := range ks[1:] {
				if took[1] > 0 && took[k] > 0 {
					b.Logf("%s: 1 worker %v, %d workers %v: speed-up %.2f× (0.8 × K = %.1f×)", mode.name,
						took[1].Round(time.Millisecond), k, took[k].Round(time.Millisecond), took[1].Seconds()/took[k].Seconds(), 0.8*float64(k))
				}
			}
		})
	}
}
