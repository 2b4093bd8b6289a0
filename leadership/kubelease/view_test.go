package kubelease_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// readSet reads the default set of ns as an operator would (no session).
func readSet(t *testing.T, ns string) *kubelease.LeaseSet {
	t.Helper()
	set, err := kubelease.NewCluster(clientset(t, api.Config()).CoordinationV1(), ns, kubelease.DefaultPrefix).ReadSet(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// One List names a job's leader while its instance Lease names the same
// holder, with the token, and every instance Lease with what its holder
// wrote; once a peer has judged the leader gone and taken the job, the
// peer leads with the next token and the gone instance's Lease is listed
// released, expired by that peer. A job Lease still naming the gone holder
// (sweep: nobody campaigned for it) has no leader.
func TestReadSetNamesTheLeaderWhileItsInstanceLeaseNamesIt(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	var c cut
	a, b := start(t, api, ns, "a", cutBy(&c)), start(t, api, ns, "b")
	ta := won(t, campaign(a, "report"))
	won(t, campaign(a, "sweep"))

	set := readSet(t, ns)
	if len(set.Leaders) != 2 || set.Leaders[1].Job != "sweep" || set.Leaders[0].Job != "report" || set.Leaders[0].Token != ta.Token() || set.Leaders[0].Instance.Instance != "a" {
		t.Fatalf("leaders %+v; want a leading report with token %d", set.Leaders, ta.Token())
	}
	if len(set.Instances) != 2 {
		t.Fatalf("instances %+v; want a and b", set.Instances)
	}
	for i, in := range set.Instances {
		name := []string{"a", "b"}[i]
		if in.Instance != name || in.Lease != "snip-jobs-instance-"+name || !strings.HasPrefix(in.Holder, name+"/") || in.PID != os.Getpid() ||
			in.Host == "" || in.Duration != ttl || in.Renewed.Before(in.Acquired) || in.Leaving || in.ExpiredBy != "" {
			t.Errorf("instance %d: %+v", i, in)
		}
	}
	if set.Leaders[0].Instance != set.Instances[0] || set.Leaders[0].Since.IsZero() {
		t.Errorf("the leader's instance Lease %+v, since %v; want a's as listed, %+v", set.Leaders[0].Instance, set.Leaders[0].Since, set.Instances[0])
	}

	c.on.Store(true) // a crashed: b judges it gone and takes the job
	tb := won(t, campaign(b, "report"))
	set = readSet(t, ns)
	if len(set.Leaders) != 1 || set.Leaders[0].Instance.Instance != "b" || set.Leaders[0].Token != ta.Token()+1 || tb.Token() != ta.Token()+1 {
		t.Errorf("leaders %+v after b took over with token %d", set.Leaders, tb.Token())
	}
	if a := set.Instances[0]; a.Instance != "a" || a.Holder != "" || a.ExpiredBy != "b" {
		t.Errorf("a's instance Lease %+v; want released, expired by b", a)
	}
}

// Resign asks the leader by its token, waits for the next term and returns
// both; a job nobody leads is leadership.ErrNoLeader.
func TestResignWaitsForTheNextTermAndRefusesAJobWithoutALeader(t *testing.T) {
	t.Parallel()
	ns := namespace(t, api)
	a, b := start(t, api, ns, "a"), start(t, api, ns, "b")
	ta := won(t, campaign(a, "certs"))
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	go a.WatchResignRequests(ctx, func(job string, token int64) {
		if job == "certs" && token == ta.Token() {
			ta.Resign(ctx)
		}
	})
	next := campaign(b, "certs")
	waitWaiting(t, b)
	cli := clientset(t, api.Config()).CoordinationV1()
	before, after, err := leadership.Resign(ctx, kubelease.NewCluster(cli, ns, kubelease.DefaultPrefix), "certs")
	if err != nil || before.Instance != "a" || before.Token != ta.Token() || after == nil || after.Instance != "b" || after.Token != ta.Token()+1 {
		t.Fatalf("Resign: before %+v, after %+v, %v; want a (token %d) then b", before, after, err, ta.Token())
	}
	if tb := won(t, next); tb.Token() != after.Token {
		t.Errorf("b's term has token %d, Resign saw %d", tb.Token(), after.Token)
	}
	if _, _, err := leadership.Resign(ctx, kubelease.NewCluster(cli, ns, kubelease.DefaultPrefix), "nobody"); !errors.Is(err, leadership.ErrNoLeader) {
		t.Errorf("Resign of a job without a Lease: %v, want ErrNoLeader", err)
	}
}
