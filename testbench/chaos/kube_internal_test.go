package chaos

import (
	"slices"
	"testing"
	"time"
)

// A job Lease's states, as the watch reports them, make the term events the
// checker reads: a holder with a new token starts a term; released, taken
// over (the successor writes the Lease directly: no expiry at the API
// server) or deleted, it ends the term it recorded; the same term again
// (an operator's resign request annotates the Lease) is nothing.
func TestAJobLeaseStatesMakeTheTermEvents(t *testing.T) {
	w := &kubeWatch{o: newEventLog(), seen: map[string]kubeTerm{}}
	at := time.Now()
	for _, s := range []kubeTerm{{1, "server-a"}, {1, "server-a"}, {1, ""}, {2, "server-b"}, {3, "server-c"}, {}} {
		w.saw(JobProbe, s, at)
	}
	w.saw(JobReport, kubeTerm{1, "server-b"}, at)
	type ev struct {
		job      string
		token    int64
		instance string
		start    bool
	}
	var got []ev
	for _, e := range w.o.log() {
		got = append(got, ev{e.Job, e.Token, e.Instance, e.Start})
	}
	want := []ev{
		{JobProbe, 1, "server-a", true}, {JobProbe, 1, "server-a", false},
		{JobProbe, 2, "server-b", true}, {JobProbe, 2, "server-b", false}, {JobProbe, 3, "server-c", true},
		{JobProbe, 3, "server-c", false}, {JobReport, 1, "server-b", true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n got %v\nwant %v", got, want)
	}
	if ls := w.o.leaders(); len(ls) != 1 || ls[JobReport].Token != 1 {
		t.Errorf("current leaders %v, want only %s's term 1", ls, JobReport)
	}
}

// Each backend runs its own kinds by default and refuses the other's: the
// etcd members' faults have no members to strike on Kubernetes, nor the
// API server's restart on etcd.
func TestEachBackendRunsItsOwnKinds(t *testing.T) {
	o, err := Options{Backend: BackendKubernetes}.withDefaults()
	if err != nil || !slices.Equal(o.Kinds, KubeKinds) {
		t.Errorf("kubernetes: kinds %v, %v; want KubeKinds", o.Kinds, err)
	}
	if o, err := (Options{}).withDefaults(); err != nil || o.Backend != BackendEtcd || !slices.Equal(o.Kinds, AllKinds) {
		t.Errorf("default: backend %q, kinds %v, %v; want etcd and AllKinds", o.Backend, o.Kinds, err)
	}
	for _, c := range []struct {
		b Backend
		k Kind
	}{{BackendKubernetes, EtcdLeaderLoss}, {BackendKubernetes, QuorumLoss}, {BackendEtcd, APIServerRestart}, {"consul", KillLeader}} {
		if _, err := (Options{Backend: c.b, Kinds: []Kind{c.k}}).withDefaults(); err == nil {
			t.Errorf("%s on %q was accepted", c.k, c.b)
		}
	}
}
