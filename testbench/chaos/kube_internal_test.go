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

// Each backend runs its own kinds by default and refuses what it cannot
// inject: the API server's restart on etcd. Kubernetes runs etcd's faults
// too, on the members beneath its API server.
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
	}{{BackendEtcd, APIServerRestart}, {"consul", KillLeader}} {
		if _, err := (Options{Backend: c.b, Kinds: []Kind{c.k}}).withDefaults(); err == nil {
			t.Errorf("%s on %q was accepted", c.k, c.b)
		}
	}
	etcdKinds := []Kind{EtcdMemberLoss, EtcdLeaderLoss, QuorumLoss, FollowersLoss}
	if _, err := (Options{Backend: BackendKubernetes, Kinds: etcdKinds}).withDefaults(); err != nil {
		t.Errorf("etcd's faults on kubernetes: %v", err)
	}
}

// On Kubernetes each job counts its own tokens, so a quorum loss records
// each job Lease's token before it: a term newer than its job's token, begun
// during the loss, is a violation (etcd's revision, far above every job's
// count, would have let it pass), while an older term of a job with a
// higher count is not; a write TTL past the loss is a violation; and the
// figure of the last write of an old term counts the probe's old terms
// only, not a new one won once the members were back. A term won between
// the read of the tokens and the kill is no violation: the observer's watch
// delivered its grant before the members were back, and nothing commits
// without a quorum.
func TestAQuorumLossOnKubernetesIsCheckedAgainstEachJobsToken(t *testing.T) {
	t0 := time.Date(2026, 12, 8, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	q := &Fault{N: 1, Kind: QuorumLoss, LossStart: at(0), RestartAt: at(4000), LossEnd: at(5000),
		PreLossRevision: 900, PreLossTokens: map[string]int64{JobProbe: 7, JobAggregator: 30}}
	f := &facts{
		terms: map[termKey]termEvent{
			{JobAggregator, 31}: {Job: JobAggregator, Token: 31, Instance: "server-c", Start: true, At: at(3)},
			{JobProbe, 9}:       {Job: JobProbe, Token: 9, Instance: "server-c", Start: true, At: at(4500)},
		},
		jobTerms: []jobTerm{
			{Job: JobProbe, Token: 8, Instance: "server-b", Started: at(500)},       // newer than the probe's 7, never seen granted
			{Job: JobAggregator, Token: 30, Instance: "server-a", Started: at(500)}, // granted before, recorded late
			{Job: JobAggregator, Token: 31, Instance: "server-c", Started: at(8)},   // won between the read and the kill
			{Job: JobProbe, Token: 9, Instance: "server-c", Started: at(4600)},      // after the members were back
		},
		probe: []probeRow{
			{Instance: "server-a", Token: 7, Seq: 1, Committed: at(1200)},
			{Instance: "server-a", Token: 7, Seq: 2, Committed: at(2500)}, // past TTL (2 s) after the loss
			{Instance: "server-c", Token: 9, Seq: 3, Committed: at(4800)},
		},
	}
	k := &checker{ttl: 2 * time.Second}
	k.checkQuorum(f, []*Fault{q})
	var got []string
	for _, v := range k.out {
		if v.Invariant != InvQuorum {
			t.Errorf("a violation of %q: %s", v.Invariant, v.Detail)
		}
		got = append(got, v.Detail)
	}
	want := []string{
		"fault 1: term 8 of probe was not granted before the quorum loss (newest before it: 7; no grant of it seen until the members were back)",
		"fault 1 (etcd-quorum-loss): probe write by server-a (token 7) accepted at 12:00:02.500, 2.5s after etcd last could renew a lease (TTL 2s)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n got %q\nwant %q", got, want)
	}
	if want := 2500 * time.Millisecond; q.LastWriteAfterLoss != want {
		t.Errorf("last write of an old term %v after the loss, want %v (the new term's write at 4.8 s is not one)", q.LastWriteAfterLoss, want)
	}
}
