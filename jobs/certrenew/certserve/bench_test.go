package certserve_test

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/certtest"
)

var handshakesPerRound = flag.Int("handshakes", 2000, "BenchmarkHandshake: handshakes per variant per round")

// BenchmarkHandshake: full TLS handshakes (ECDSA P-256, TLS 1.3, no
// resumption) against a server whose certificate comes from certserve, and,
// alternated with it round by round in the same run, the baseline without it:
// the same certificate fixed in tls.Config.Certificates. The per-handshake
// query that certrenew.Current would cost is shown for contrast. Per variant:
// the median of the rounds' handshakes/s, and what PostgreSQL counted
// (pg_stat_statements) of reads of the renewer's tables per 10,000
// handshakes.
//
//	go test ./jobs/certrenew/certserve -run '^$' -bench Handshake -benchtime 3x -handshakes 2000
func BenchmarkHandshake(b *testing.B) {
	f := newFixture(b)
	f.store("shop.example.com", f.keys)
	src := f.certificates(f.keys)
	crt, _ := src.Lookup("shop.example.com")
	variants := []struct{ name, addr string }{
		{"fixed-baseline", tlsServerWith(b, &tls.Config{Certificates: []tls.Certificate{*crt.TLS}})},
		{"certserve", tlsServer(b, src)},
		{"current-per-handshake", tlsServerWith(b, &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := certrenew.Current(context.Background(), f.pool, f.keys, h.ServerName)
			if err != nil {
				return nil, err
			}
			pair, err := c.TLSCertificate()
			return &pair, err
		}})},
	}
	rates := make([][]float64, len(variants))
	queries := make([]int64, len(variants))
	for b.Loop() { // one round: every variant once, in turn
		for i, v := range variants {
			before, start := f.readerQueries(), time.Now()
			for range *handshakesPerRound {
				if _, err := f.handshake(v.addr, "shop.example.com"); err != nil {
					b.Fatal(err)
				}
			}
			rates[i] = append(rates[i], float64(*handshakesPerRound)/time.Since(start).Seconds())
			queries[i] += f.readerQueries() - before
		}
	}
	for i, v := range variants {
		slices.Sort(rates[i])
		b.ReportMetric(rates[i][len(rates[i])/2], v.name+"-handshakes/s")
		b.ReportMetric(float64(queries[i])*10000/float64(len(rates[i])**handshakesPerRound), v.name+"-reads/10k")
	}
}

// BenchmarkCommitToServed: the time from the commit of a renewal (the
// renewer's storing transaction) to the new certificate being what
// GetCertificate returns, over b.N renewals; p50, p99 and max.
//
//	go test ./jobs/certrenew/certserve -run '^$' -bench CommitToServed -benchtime 200x
func BenchmarkCommitToServed(b *testing.B) {
	f := newFixture(b)
	f.store("shop.example.com", f.keys)
	src := f.certificates(f.keys)
	var lat []time.Duration
	for b.Loop() {
		b.StopTimer()
		serial, chain, key := f.issue("shop.example.com")
		b.StartTimer()
		committed := f.storeIssued("shop.example.com", serial, chain, key)
		waitServed(b, src, "shop.example.com", serial)
		lat = append(lat, time.Since(committed))
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(at(1), "max-ms")
}

var floodFor = flag.Duration("flood", 20*time.Second, "BenchmarkChallengeFlood: how long each phase lasts")

// BenchmarkChallengeFlood: 64 clients asking the challenge listener for
// random tokens on random hosts, as the internet would, while a heartbeat
// writes a row every 100 ms through its own connection (the jobs' work).
// Phases alternate: quiet, then a flood of the listener with its defaults (an
// unknown token waits up to DefaultMissWait in one of DefaultMaxWaiters
// slots), quiet, then a flood of one that never waits (its raw capacity).
// Each reports the heartbeat's longest gap and p99, the requests made, and
// what PostgreSQL counted: statements reading the challenges
// (pg_stat_statements) and the database's transactions (pg_stat_database).
//
//	go test ./jobs/certrenew/certserve -run '^$' -bench ChallengeFlood -benchtime 1x -flood 20s -v
func BenchmarkChallengeFlood(b *testing.B) {
	f := newFixture(b)
	listener := func(opts ...certserve.ChallengesOption) string {
		h, err := certserve.NewChallenges(f.config(), opts...)
		if err != nil {
			b.Fatal(err)
		}
		certtest.Run(b, h.Run, h.Ready())
		return serveChallenges(b, h, certserve.DefaultServerLimits())
	}
	waiting, noWait := listener(), listener(certserve.WithMissWait(0, 0))
	benchtest.Exec(b, f.pool, `CREATE TABLE heartbeat (at timestamptz NOT NULL)`)
	for b.Loop() {
		for _, phase := range []struct{ name, addr string }{
			{"quiet", ""}, {"flood", waiting}, {"quiet", ""}, {"flood-no-wait", noWait},
		} {
			queries, xacts := f.readerQueries(), f.xacts()
			gaps, requests := heartbeatDuring(b, f, phase.addr, *floodFor)
			b.Logf("%-13s: heartbeat gap p99 %v max %v; %d requests (%.0f/s); challenge reads %d; database transactions %d",
				phase.name, gaps[len(gaps)*99/100].Round(time.Millisecond), gaps[len(gaps)-1].Round(time.Millisecond),
				requests, float64(requests)/floodFor.Seconds(), f.readerQueries()-queries, f.xacts()-xacts)
		}
	}
}

// heartbeatDuring writes heartbeats for d (flooding addr meanwhile, unless
// it is "") and returns the sorted gaps between them and the requests made.
func heartbeatDuring(b *testing.B, f *fixture, addr string, d time.Duration) ([]time.Duration, int64) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var requests atomic.Int64
	var wg sync.WaitGroup
	for i := 0; addr != "" && i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{}).DialContext, MaxIdleConnsPerHost: 1}}
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet,
					fmt.Sprintf("http://%s%s%s", addr, certserve.ChallengePath, randomToken(b)), nil)
				req.Host = fmt.Sprintf("h%d.example.com", requests.Add(1))
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	var gaps []time.Duration
	last := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
			continue
		}
		if _, err := f.pool.Exec(context.Background(), `INSERT INTO heartbeat VALUES (now())`); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		gaps = append(gaps, now.Sub(last))
		last = now
	}
	wg.Wait()
	slices.Sort(gaps)
	return gaps, requests.Load()
}

// xacts is the database's committed and rolled-back transactions, as
// PostgreSQL counts them (flushed lazily: read after a pause).
func (f *fixture) xacts() int64 {
	f.t.Helper()
	return benchtest.Value[int64](f.t, f.pool, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`)
}
