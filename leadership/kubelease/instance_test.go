package kubelease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// A process started under the same instance name while its predecessor's
// instance Lease is still held, and whose host cannot prove the predecessor
// gone (here: another host's), takes that Lease only after seeing it
// unchanged for its duration; the predecessor's term had stopped being valid
// before, and the new process then takes the job at once.
func TestARestartedProcessWaitsOutAPredecessorItCannotProveGone(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	var c cut
	old := start(t, api, ns, "a", cutBy(&c), withHost("host-old"))
	told := won(t, campaign(old, "sweep"))
	c.on.Store(true) // crashed
	fresh := start(t, api, ns, "a")
	tnew := won(t, campaign(fresh, "sweep"))
	waitEnded(t, told)
	if told.Reason() != leadership.ReasonExpired {
		t.Errorf("the predecessor's term ended %q, want %q", told.Reason(), leadership.ReasonExpired)
	}
	if gap := tnew.Started().Sub(told.EndedAt()); gap < margin {
		t.Errorf("the new term started %v after the old one stopped being valid; want at least the margin %v", gap, margin)
	}
	if tnew.Token() != told.Token()+1 {
		t.Errorf("token %d after %d", tnew.Token(), told.Token())
	}
	if n := fresh.Stats().Reclaimed; n != 1 {
		t.Errorf("the restarted process reclaimed %d instance Leases, want 1", n)
	}
}

// A second live process with the same instance name stops with a
// DuplicateInstanceError, and the first keeps its term: at once when the
// first is a running process of the same host (its annotations say so), or
// once it sees the Lease renewed while it waits, when it is another host's.
func TestASecondLiveProcessWithTheSameNameStops(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"", "host-other"} {
		t.Run("host="+host, func(t *testing.T) {
			t.Parallel()
			ns := namespace(t, api)
			first := start(t, api, ns, "a")
			term := won(t, campaign(first, "sweep"))
			second, err := kubelease.NewSession(kubelease.Config{Client: clientset(t, api.Config()).CoordinationV1(), Namespace: ns,
				Config: leadership.Config{Instance: "a", Host: host, TTL: ttl, Margin: margin, RenewInterval: renew, Logger: benchtest.Logger(t)}})
			if err != nil {
				t.Fatal(err)
			}
			defer second.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
			defer cancel()
			err = second.WaitReady(ctx)
			var dup *kubelease.DuplicateInstanceError
			if !errors.As(err, &dup) || !errors.Is(err, leadership.ErrDuplicateInstance) {
				t.Fatalf("the second process: %v, want a DuplicateInstanceError", err)
			}
			if !term.Valid() {
				t.Error("the first process's term ended")
			}
		})
	}
}

// A write of the instance Lease whose answer is lost (here Deregister's, as
// a close cuts it short; the API server committed it, the version moved)
// does not keep Close from deleting the Lease: a shutdown leaves no instance
// Lease behind, for a restart under the same name to wait for.
func TestCloseDeletesTheInstanceLeaseAfterAWriteWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	lost := errors.New("test: the answer is lost")
	a := start(t, api, ns, "a", onWrite("jobs.snip.dev/leaving", func(context.Context) error { return lost }))
	ctx := context.Background()
	if err := a.Deregister(ctx); !errors.Is(err, lost) {
		t.Fatalf("Deregister: %v; want its answer lost", err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	name := kubelease.DefaultPrefix + "-instance-a"
	if l, err := clientset(t, api.Config()).CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("instance Lease %s after Close: %+v, %v; want it deleted", name, l, err)
	}
}

// A take of the instance Lease whose answer is lost (the API server
// committed it) is this session's own when it reads the Lease again: it
// takes it over and starts, rather than stop as if another live process
// held the name.
func TestATakeOfTheInstanceLeaseWhoseAnswerWasLostIsTheSessionsOwn(t *testing.T) {
	t.Parallel()
	var writes atomic.Int32
	lost := func(context.Context) error {
		if writes.Add(1) == 1 {
			return errors.New("test: the answer is lost")
		}
		return nil
	}
	a := start(t, api, namespace(t, api), "a", onWrite("-instance-a", lost))
	if err := a.Err(); err != nil || writes.Load() < 2 {
		t.Errorf("session after its first write's answer was lost: %v, %d writes", err, writes.Load())
	}
}

// A session closed while its take of the instance Lease is on its way waits
// for the answer, and deletes the Lease it took: it leaves none behind
// naming a process that may live on.
func TestASessionClosedAsItTakesItsInstanceLeaseLeavesNone(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	sessions := make(chan *leadership.Session, 1)
	closing := func(ctx context.Context) error {
		s := <-sessions
		go s.Close(context.Background())
		benchtest.Eventually(t, "the session closing", func() bool { return s.Err() != nil })
		return ctx.Err()
	}
	rc := api.Config()
	cfg := kubelease.Config{Namespace: ns, Config: leadership.Config{Instance: "a", TTL: ttl, Margin: margin, RenewInterval: renew,
		Logger: benchtest.Logger(t)}}
	onWrite("-instance-a", closing)(&cfg, rc)
	cfg.Client = clientset(t, rc).CoordinationV1()
	s, err := kubelease.NewSession(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sessions <- s
	select {
	case <-s.Done():
	case <-time.After(benchtest.Patience):
		t.Fatal("the session did not stop")
	}
	name := kubelease.DefaultPrefix + "-instance-a"
	if l, err := clientset(t, api.Config()).CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("instance Lease %s after Close: %+v, %v; want it deleted", name, l, err)
	}
}

// jumpClock is the boot clock plus what a test added: a jump stands for a
// pause of the process (or a suspend of its host) that the clock counts.
type jumpClock struct{ add atomic.Int64 }

func (c *jumpClock) Now() time.Duration {
	return leadership.BootClock{}.Now() + time.Duration(c.add.Load())
}

// A renewal whose deadline passed on its way (the process was paused while
// it was out; its answer, or its failure, comes after) ends the lease as
// expired at once, and is no failed renewal: the deadline's own timer could
// run only later, and the logs would say a renewal failed where the lease
// had expired.
func TestARenewalWhoseDeadlinePassedOnItsWayEndsTheLeaseExpiredNotFailed(t *testing.T) {
	t.Parallel()
	clock := &jumpClock{}
	var armed atomic.Bool
	paused := func(context.Context) error {
		if !armed.CompareAndSwap(true, false) {
			return nil
		}
		clock.add.Add(int64(2 * ttl))
		return errors.New("test: the renewal's answer came after a pause")
	}
	s := start(t, api, namespace(t, api), "a", func(c *kubelease.Config, _ *rest.Config) { c.Clock = clock },
		onWrite("-instance-a", paused))
	armed.Store(true) // the next renewal
	benchtest.WaitChange(t, "the lease ended", s.StatsChanged, func() bool { return s.Stats().LeaseEnds[leadership.ReasonExpired] > 0 })
	if st := s.Stats(); st.KeepAliveFailures != 0 || armed.Load() {
		t.Errorf("after a renewal whose deadline passed on its way: %d failed renewals (armed still: %v); want the lease expired and none failed",
			st.KeepAliveFailures, armed.Load())
	}
}
