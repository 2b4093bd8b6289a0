package devcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/leadership/kubelease/layout"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// The Leases' place on the dev API server.
const (
	kubeNamespace = "default"
	kubePrefix    = "snip-jobs"
)

// kubeTerms is a local kube-apiserver (package kubeapi, from the binary
// already built in the cache) and a client to it.
type kubeTerms struct {
	srv       *kubetest.Server
	cli       coordclient.CoordinationV1Interface
	tokenFile string
	ttl       time.Duration
}

// startKube starts the API server; it refuses to build kube-apiserver (the
// first build takes about 8½ minutes on two cores).
func startKube(ctx context.Context, dir string, ttl time.Duration) (_ *kubeTerms, err error) {
	k := &kubeTerms{ttl: ttl, tokenFile: filepath.Join(dir, "kube-token")}
	k.srv, err = kubetest.Start(ctx, kubetest.Options{NoBuild: true})
	if err != nil {
		return nil, fmt.Errorf("--backend kubernetes: %w", err)
	}
	if k.cli, err = coordclient.NewForConfig(k.srv.Config()); err != nil {
		k.close()
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if err := os.WriteFile(k.tokenFile, []byte(k.srv.Token()+"\n"), 0o600); err != nil {
		k.close()
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	return k, nil
}

func (k *kubeTerms) configSection() string {
	return kubeSection(k.srv.URL(), k.tokenFile, k.srv.Config().TLSClientConfig.CAFile)
}

// kubeSection is an instance config's kubernetes section.
func kubeSection(server, tokenFile, caFile string) string {
	return fmt.Sprintf("kubernetes:\n  server: %s\n  token_file: %s\n  ca_file: %s\n  namespace: %s\n  prefix: %s\n",
		server, tokenFile, caFile, kubeNamespace, kubePrefix)
}

func (k *kubeTerms) leadershipLine() string { return "backend: kubernetes" }

func (k *kubeTerms) where() (string, string) {
	return "kubernetes", fmt.Sprintf("%s  (a local kube-apiserver; Leases %s-* in namespace %s)", k.srv.URL(), kubePrefix, kubeNamespace)
}

func (k *kubeTerms) cluster() leadership.Cluster { return k.lc() }

func (k *kubeTerms) endsLease() string { return "deletes its instance Lease" }

func (k *kubeTerms) lc() *kubelease.Cluster {
	return kubelease.NewCluster(k.cli, kubeNamespace, kubePrefix)
}

// watch reads the set's leaders (kubelease.Cluster.ReadSet) at every change of one
// of its Leases, and says what changed. A renewal of an instance Lease is a
// change too: a leader whose instance Lease a peer marked expired is over.
func (k *kubeTerms) watch(ctx context.Context, f func(leaderChange)) error {
	var last map[string]leaderRef
	for ctx.Err() == nil {
		w, err := k.cli.Leases(kubeNamespace).Watch(ctx, metav1.ListOptions{LabelSelector: layout.SetSelector(kubePrefix)})
		if err != nil {
			sleep.For(ctx, time.Second)
			continue
		}
		last = k.diff(ctx, last, f) // after the watch started: nothing is missed
		for range w.ResultChan() {
			last = k.diff(ctx, last, f)
		}
		w.Stop()
	}
	return nil
}

// diff reads the leaders and calls f for what differs from last (nil: the
// first read); it returns the leaders read, or last when the read failed.
func (k *kubeTerms) diff(ctx context.Context, last map[string]leaderRef, f func(leaderChange)) map[string]leaderRef {
	set, _ := k.lc().ReadSet(ctx)
	if set == nil {
		return last
	}
	now := map[string]leaderRef{}
	for _, l := range set.Leaders {
		now[l.Job] = leaderRef{l.Instance.Instance, l.Token}
	}
	for job, l := range last {
		if now[job] != l {
			f(leaderChange{job, l, changeOver})
		}
	}
	for job, l := range now {
		switch {
		case last == nil:
			f(leaderChange{job, l, changeCurrent})
		case last[job] != l:
			f(leaderChange{job, l, changeStarted})
		}
	}
	return now
}

func (k *kubeTerms) close() {
	if k.srv != nil {
		k.srv.Close()
	}
}
