package kubelease_test

import (
	"context"
	"testing"
	"time"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// The API server crashes (its process is killed; etcd and the port stay) and starts
// again. A term whose deadline passes while it is down ends by expiry at
// that deadline; a term whose deadline is further away either survives,
// renewed after the restart before its deadline, or ends by expiry at it:
// whichever happens, it agrees with the deadline. After the restart the job
// whose term ended is won again, with a higher token.
func TestAnAPIServerRestartEndsTermsOnlyByTheirDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := kubetest.Start(ctx, kubetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close) // after the sessions' own cleanups
	ns := namespace(t, srv)
	short := start(t, srv, ns, "short")
	long := start(t, srv, ns, "long", withTTL(20*time.Second, 6*time.Second, 2*time.Second))
	ts := won(t, campaign(short, "short-job"))
	tl := won(t, campaign(long, "long-job"))

	srv.Kill()
	atStop := tl.Deadline() // no renewal can be answered from here until the restart
	waitEnded(t, ts)
	if ts.Reason() != leadership.ReasonExpired || ts.Valid() {
		t.Fatalf("the short term ended %q (valid %v), want %q", ts.Reason(), ts.Valid(), leadership.ReasonExpired)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()

	again := won(t, campaign(short, "short-job"))
	if again.Token() <= ts.Token() || !again.Valid() {
		t.Errorf("after the restart: token %d (before %d), valid %v", again.Token(), ts.Token(), again.Valid())
	}

	benchtest.WaitChange(t, "the long term renewed after the restart, or ended", long.StatsChanged, func() bool {
		return tl.Err() != nil || long.Stats().LastRenewal.After(restarted)
	})
	if tl.Err() == nil {
		if sent := long.Stats().LastRenewal; !sent.Before(atStop) {
			t.Errorf("the long term survived a renewal sent %v after its deadline", sent.Sub(atStop))
		}
		if !tl.Valid() {
			t.Error("the long term has not ended but is not valid")
		}
	} else {
		// Both instants are the session's clock read as wall-clock time now,
		// each at its own moment: they may differ by the reading's jitter.
		if d := tl.EndedAt().Sub(atStop).Abs(); tl.Reason() != leadership.ReasonExpired || d > time.Millisecond {
			t.Errorf("the long term ended %q at %v from the deadline it had at the stop", tl.Reason(), tl.EndedAt().Sub(atStop))
		}
	}
	t.Logf("long term survived the restart: %v", tl.Err() == nil)
}
