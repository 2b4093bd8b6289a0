package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// In steady state a running instance asks etcd for one thing only: one
// keep-alive per renew interval, on one stream it keeps open, whatever the
// number of jobs it leads (here twelve singletons); etcd ends nothing with an
// error code. Counted at etcd's own /metrics, which only this instance uses.
// Not parallel: etcd members embedded in one test process count into one
// registry, so the figures are this test's only while no other test runs.
func TestARunningInstanceAsksEtcdOnlyForKeepAlivesOnOneStream(t *testing.T) {
	etcd := etcdtest.Start(t, 1)
	observer := etcdClient(t, etcd.Endpoint(0))
	url := benchtest.PostgresDB(t)
	env := dbEnv(url)
	var jobs strings.Builder
	for i := range 12 {
		fmt.Fprintf(&jobs, "\n  - name: pulse-%d\n    type: sql\n    singleton: true\n    every: 1s\n    options:\n      statement: SELECT @token::bigint\n", i)
	}
	c := config{instance: "server-a", endpoints: []string{etcd.Endpoint(0)}, jobs: jobs.String()}
	migrate(t, writeConfig(t, c), url)
	in := start(t, c, env)
	in.waitReady()
	for i := range 12 {
		leaderOf(t, observer, fmt.Sprint("pulse-", i), 0)
	}
	observer.Close() // from now on only the instance talks to etcd

	ctx := context.Background()
	scrape := func() (etcdSide benchtest.Metrics, sent float64) {
		t.Helper()
		m, err := benchtest.ScrapeMetrics(ctx, in.admin)
		if err != nil {
			t.Fatal(err)
		}
		return etcd.Metrics(t, 0), m.Sum("snip_jobs_keepalives_sent_total")
	}
	var before benchtest.Metrics
	var sentBefore float64
	eventually(t, "a first keep-alive (the stream opens with it)", func() bool {
		before, sentBefore = scrape()
		return sentBefore >= 2
	})
	var after benchtest.Metrics
	var sent float64
	eventually(t, "five more keep-alives", func() bool {
		after, sent = scrape()
		return sent >= sentBefore+5
	})
	d := after.Minus(before)
	keepAlives := d.Sum("grpc_server_msg_received_total", `grpc_method="LeaseKeepAlive"`)
	if all := d.Sum("grpc_server_msg_received_total"); all != keepAlives {
		t.Errorf("etcd received %v requests, %v of them keep-alives: the instance asks for more than keep-alives in steady state", all, keepAlives)
	}
	// A keep-alive is counted by the instance just before it leaves, by etcd
	// when it arrives: the two counts differ by the one in flight at most.
	if n := sent - sentBefore; keepAlives < n-1 || keepAlives > n+1 {
		t.Errorf("etcd received %v keep-alives while the instance sent %v", keepAlives, n)
	}
	if streams := d.Sum("grpc_server_started_total"); streams != 0 {
		var which []string
		for k, v := range d {
			if strings.HasPrefix(k, "grpc_server_started_total") && v != 0 {
				which = append(which, k)
			}
		}
		t.Errorf("etcd saw %v new streams in steady state (%v); want the keep-alive stream and the watches kept open", streams, which)
	}
	if bad := d.NotOK(); bad != 0 {
		t.Errorf("etcd ended %v calls with an error code", bad)
	}
}
