package kubelease_test

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/internal/kubeapi"
	"github.com/snip/snip-jobs/leadership/kubelease"
)

// Under RBAC, a user allowed only Leases in one namespace can do everything
// the backend needs (take, renew, hand over, resign, delete at Close), and is
// refused Leases elsewhere, so the allowance is real.
func TestAUserAllowedOnlyLeasesInOneNamespaceCanLeadAndHandOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const token = "leases-only-token"
	srv, err := kubeapi.Start(ctx, kubeapi.Options{RBAC: true, ExtraTokens: []string{token + ",snip,snip-uid"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ns := namespace(t, srv)
	admin := clientset(t, srv.Config())
	_, err = admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "snip-jobs-leases"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "snip-jobs-leases"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "snip-jobs-leases"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "snip"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	user := srv.TokenConfig(token)
	if _, err := clientset(t, user).CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing Leases in another namespace: %v, want forbidden", err)
	}
	a := start(t, srv, ns, "a", asToken(token))
	b := start(t, srv, ns, "b", asToken(token))
	ta := won(t, campaign(a, "report"))
	wb := campaign(b, "report")
	waitWaiting(t, b)
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	tb := won(t, wb)
	if tb.Token() != ta.Token()+1 {
		t.Errorf("token %d after %d", tb.Token(), ta.Token())
	}
	closeCtx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	if err := b.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoordinationV1().Leases(ns).Get(ctx, kubelease.DefaultPrefix+"-instance-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("b's instance Lease after Close: %v, want it deleted", err)
	}
}
