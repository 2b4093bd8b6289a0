package kubelease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// One session wins 100 jobs campaigned for at once, and a second session's
// 100 campaigns all wait: neither loses its instance Lease on the way (its
// renewals do not queue behind the campaigns' writes), every token is 1, and
// the API server holds one watch per session, not one per job (its own
// gauge apiserver_longrunning_requests). Not parallel: it counts watches
// at the shared API server.
func TestASessionWinsAHundredJobsAtOnceWithOneWatchAndKeepsItsInstanceLease(t *testing.T) {
	ns := namespace(t, api)
	hc, err := api.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	watches := func() float64 {
		m, err := benchtest.ScrapeMetricsWith(context.Background(), hc, api.URL())
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("apiserver_longrunning_requests", `resource="leases"`, `verb="WATCH"`)
	}
	before := watches()
	// The production timing: a renewal queued for 10 s would end every term.
	opt := withTTL(15*time.Second, 5*time.Second, 2*time.Second)
	leader, follower := start(t, api, ns, "leader", opt), start(t, api, ns, "follower", opt)
	const jobs = 100
	var chans []<-chan result
	for i := range jobs {
		chans = append(chans, campaign(leader, fmt.Sprintf("job-%d", i)))
	}
	for _, ch := range chans {
		if term := won(t, ch); term.Token() != 1 {
			t.Errorf("%s: token %d, want 1", term.Job(), term.Token())
		}
	}
	for i := range jobs {
		campaign(follower, fmt.Sprintf("job-%d", i))
	}
	benchtest.WaitChange(t, "every campaign of the follower waiting", follower.StatsChanged,
		func() bool { return follower.Stats().Waiting == jobs })
	if n := watches() - before; n != 2 {
		t.Errorf("%v more Lease watches open at the API server with 100 terms and 100 waiting campaigns; want 2 (one per session)", n)
	}
	for _, s := range []*leadership.Session{leader, follower} {
		st := s.Stats()
		ended := int64(0)
		for _, n := range st.LeaseEnds {
			ended += n
		}
		if st.LeasesGranted != 1 || ended != 0 {
			t.Errorf("%s: instance Lease granted %d times, ended %v; want once, never", s.Instance(), st.LeasesGranted, st.LeaseEnds)
		}
	}
}
