package kubelease_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

// While one session leads five jobs and another waits for all five, the API
// server sees only the two instance Leases' renewals: no read of a Lease (the
// waiting session learns by watch; a failed renewal may read its own Lease) and no write per job (one renewal per
// process). Counted by the API server (apiserver_request_total); its own
// identity Lease adds at most one write per 10 s, and the window is a few
// renewals long.
func TestWaitingAndLeadingCostOnlyTheRenewals(t *testing.T) {
	ns := namespace(t, api)
	a, b := start(t, api, ns, "a"), start(t, api, ns, "b")
	for i := range 5 {
		won(t, campaign(a, fmt.Sprintf("job-%d", i)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 5 {
		go b.Campaign(ctx, fmt.Sprintf("job-%d", i))
	}
	benchtest.WaitChange(t, "b waiting for all five jobs", b.StatsChanged, func() bool { return b.Stats().Waiting == 5 })

	hc, err := api.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	renewals := func() int64 { return a.Stats().KeepAlivesSent + b.Stats().KeepAlivesSent }
	failures := func() int64 { return a.Stats().KeepAliveFailures + b.Stats().KeepAliveFailures }
	r0, f0 := renewals(), failures()
	before, err := benchtest.ScrapeMetricsWith(ctx, hc, api.URL())
	if err != nil {
		t.Fatal(err)
	}
	benchtest.WaitChange(t, "twelve more renewals", a.StatsChanged, func() bool { return renewals() >= r0+12 })
	after, err := benchtest.ScrapeMetricsWith(ctx, hc, api.URL())
	if err != nil {
		t.Fatal(err)
	}
	r1, f1 := renewals(), failures()
	d := after.Minus(before)
	count := func(verb string) int64 {
		return int64(d.Sum("apiserver_request_total", `resource="leases"`, `verb="`+verb+`"`))
	}
	// A renewal that failed (slow under load) may be followed by one read of
	// the instance Lease; nothing else reads.
	if n := count("GET") + count("LIST"); n > f1-f0 {
		t.Errorf("%d Lease reads while one session led and one waited, after %d failed renewals; want none beyond one per failure (the waiting session watches)", n, f1-f0)
	}
	if n := count("POST") + count("DELETE") + count("PATCH"); n != 0 {
		t.Errorf("%d other Lease requests; want none", n)
	}
	// Renewals are counted when sent, the API server counts them when done:
	// each session has at most one out at a time, so at either end of the
	// window at most two per session fall on one side only; the API
	// server's own heartbeat adds at most one. A write per job would be five
	// per renewal.
	if puts := count("PUT"); puts < r1-r0-4 || puts > r1-r0+5 {
		t.Errorf("%d Lease updates for %d renewals of the two instance Leases (5 jobs led): want one per renewal", puts, r1-r0)
	}
}
