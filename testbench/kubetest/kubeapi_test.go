package kubetest_test

import (
	"context"
	"testing"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/snip/snip-jobs/testbench/etcdtest"
	"github.com/snip/snip-jobs/testbench/etcdtlstest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// A started server answers the Lease API with a client that verifies its
// certificate, and after Stop and Start on the same port and etcd it still
// has the Lease written before.
func TestTheServerServesLeasesAndKeepsThemAcrossARestart(t *testing.T) {
	ctx := context.Background()
	s, leases := startWithALease(t, kubetest.Options{})
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Get(ctx, "kit", metav1.GetOptions{}); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := leases.Get(ctx, "kit", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "a" {
		t.Errorf("after the restart the lease's holder is %v, want a", l.Spec.HolderIdentity)
	}
}

// Over an etcd cluster of the caller's (Options.Etcd) with TLS and etcd's
// authentication on, the server logs in by its client certificate alone (its
// common name is an etcd user with the root role, as kube-apiserver cannot
// send a password), serves Leases, and keeps them in that cluster under the
// prefix given.
func TestTheServerStoresItsDataInTheCallersEtcdOverTLSWithAuthentication(t *testing.T) {
	ctx := context.Background()
	etcd := etcdtest.StartSecure(t, 3, "/snip-jobs")
	sec := etcd.Security()
	root := etcd.Client(t)
	if err := etcdtlstest.AddCertUser(ctx, root, "kube-apiserver", "root"); err != nil {
		t.Fatal(err)
	}
	cert, key, err := sec.PKI.CertUser("kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	startWithALease(t, kubetest.Options{Etcd: &kubetest.Etcd{
		Servers: etcd.Endpoints(), CAFile: sec.PKI.CA, CertFile: cert, KeyFile: key, Prefix: "/kube-test",
	}})
	resp, err := root.Get(ctx, "/kube-test/leases/default/kit")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Errorf("the Lease is not in the caller's etcd at /kube-test/leases/default/kit (%d keys)", len(resp.Kvs))
	}
}

// startWithALease starts a server (closed at the test's end) and writes the
// Lease default/kit, held by "a", through it.
func startWithALease(t *testing.T, opts kubetest.Options) (*kubetest.Server, coordclient.LeaseInterface) {
	t.Helper()
	s, err := kubetest.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cs, err := kubetest.NewClientset(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	leases := cs.CoordinationV1().Leases("default")
	holder := "a"
	if _, err := leases.Create(context.Background(), &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kit"}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return s, leases
}
