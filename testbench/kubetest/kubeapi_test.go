package kubetest_test

import (
	"context"
	"testing"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/testbench/kubetest"
)

// A started server answers the Lease API with a client that verifies its
// certificate, and after Stop and Start on the same port and etcd it still
// has the Lease written before.
func TestTheServerServesLeasesAndKeepsThemAcrossARestart(t *testing.T) {
	ctx := context.Background()
	s, err := kubetest.Start(ctx, kubetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cs, err := kubetest.NewClientset(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	leases := cs.CoordinationV1().Leases("default")
	holder := "a"
	if _, err := leases.Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kit"}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
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
