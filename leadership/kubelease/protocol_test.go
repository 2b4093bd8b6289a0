package kubelease_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// WatchInstances follows the instances that are up from the session's watch:
// both, then without the one that deregistered (its terms still valid),
// then without the one whose renewals stopped once its Lease has been seen
// unchanged for its duration. ClusterLoad counts the terms of the instances
// that are up.
func TestInstancesUpAndTheirLoad(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	var c cut
	a, b := start(t, api, ns, "a"), start(t, api, ns, "b", cutBy(&c))
	obs := start(t, api, ns, "obs")
	ta := won(t, campaign(a, "one"))
	won(t, campaign(a, "two"))
	won(t, campaign(b, "three"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan []string, 16)
	go obs.WatchInstances(ctx, func(names []string) { seen <- names })
	waitNames := func(want ...string) {
		t.Helper()
		for {
			select {
			case got := <-seen:
				if slices.Equal(got, want) {
					return
				}
			case <-time.After(benchtest.Patience):
				t.Fatalf("instances up never became %v", want)
			}
		}
	}
	waitNames("a", "b", "obs")
	load, err := obs.ClusterLoad(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"a": 2, "b": 1, "obs": 0}; !maps.Equal(load, want) {
		t.Errorf("cluster load %v, want %v", load, want)
	}

	if err := a.Deregister(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitNames("b", "obs")
	if !ta.Valid() {
		t.Error("Deregister ended a term")
	}
	c.on.Store(true)
	waitNames("obs")
	load, err = obs.ClusterLoad(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"obs": 0}; !maps.Equal(load, want) {
		t.Errorf("cluster load %v, want %v", load, want)
	}
}

// An operator's resign request (an annotation on the job Lease) reaches the
// holder's WatchResignRequests with the job and the token named.
func TestAResignRequestReachesTheWatcher(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	a := start(t, api, ns, "a")
	term := won(t, campaign(a, "certs"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type req struct {
		job   string
		token int64
	}
	got := make(chan req, 4)
	go a.WatchResignRequests(ctx, func(job string, token int64) { got <- req{job, token} })
	admin := clientset(t, api.Config())
	// Pending requests are delivered too, so this one arrives whether the
	// watcher had started or not.
	if err := kubelease.NewCluster(admin.CoordinationV1(), ns, kubelease.DefaultPrefix).RequestResign(ctx, "certs", term.Token()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r != (req{"certs", term.Token()}) {
			t.Fatalf("resign request %+v, want certs/%d", r, term.Token())
		}
	case <-time.After(benchtest.Patience):
		t.Fatal("no resign request arrived")
	}
}

// Bad names and timing are reported together, each naming what is wrong.
func TestConfigErrorsNameWhatIsWrong(t *testing.T) {
	t.Parallel()
	_, err := kubelease.NewSession(kubelease.Config{Namespace: "Bad NS", Config: leadership.Config{Instance: "Server_1", TTL: 1500 * time.Millisecond}})
	if err == nil {
		t.Fatal("a bad config was accepted")
	}
	for _, want := range []string{"Client is required", `instance name "Server_1"`, `namespace "Bad NS"`, "TTL 1.5s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	// One lost renewal must not end the terms: two renewals fit before the deadline.
	_, err = kubelease.NewSession(kubelease.Config{Client: clientset(t, api.Config()).CoordinationV1(), Config: leadership.Config{Instance: "ok", TTL: 3 * time.Second, Margin: time.Second, RenewInterval: time.Second}})
	if err == nil || !strings.Contains(err.Error(), "renew interval 1s leaves room for fewer than two keep-alives") {
		t.Errorf("a renew interval of half the room: %v", err)
	}
	throttled := api.Config()
	throttled.QPS = 0 // client-go's default: 5 requests/s
	_, err = kubelease.NewSession(kubelease.Config{Client: clientset(t, throttled).CoordinationV1(), Config: leadership.Config{Instance: "ok"}})
	if err == nil || !strings.Contains(err.Error(), "rate-limited to 5 requests/s") {
		t.Errorf("a rate-limited client: %v", err)
	}
	s, err := kubelease.NewSession(kubelease.Config{Client: clientset(t, api.Config()).CoordinationV1(), Config: leadership.Config{Instance: "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Campaign(context.Background(), "Weekly Report"); err == nil || !strings.Contains(err.Error(), `job name "Weekly Report"`) {
		t.Errorf("a bad job name: %v", err)
	}
}
