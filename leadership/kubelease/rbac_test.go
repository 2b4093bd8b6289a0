package kubelease_test

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// Under RBAC, a user allowed only Leases in one namespace can do everything
// the backend needs (take, renew, hand over, resign, delete at Close), and is
// refused Leases elsewhere, so the allowance is real. An operator allowed
// only get, list and patch there can read the leaders (snip-jobs status) and
// have one resign (snip-jobs resign).
func TestAUserAllowedOnlyLeasesInOneNamespaceCanLeadAndHandOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const token, opToken = "leases-only-token", "operator-token"
	srv, err := kubetest.Start(ctx, kubetest.Options{RBAC: true, ExtraTokens: []string{token + ",snip,snip-uid", opToken + ",operator,operator-uid"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ns := namespace(t, srv)
	admin := clientset(t, srv.Config())
	allow(t, admin, ns, "snip", "get", "list", "watch", "create", "update", "patch", "delete")
	allow(t, admin, ns, "operator", "get", "list", "patch")
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
	operatorResigns(t, srv.TokenConfig(opToken), ns, a, b, tb)
	closeCtx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	if err := b.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoordinationV1().Leases(ns).Get(ctx, kubelease.DefaultPrefix+"-instance-b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("b's instance Lease after Close: %v, want it deleted", err)
	}
}

// allow grants user verbs on Leases in ns.
func allow(t *testing.T, admin *kubetest.Clientset, ns, user string, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "leases-" + user},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "leases-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "leases-" + user},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// operatorResigns reads the leader of report (b's term tb) as the operator
// and has it resign to a, which is campaigning.
func operatorResigns(t *testing.T, op *rest.Config, ns string, a, b *leadership.Session, tb *leadership.Term) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	cli := clientset(t, op).CoordinationV1()
	set, err := kubelease.NewCluster(cli, ns, kubelease.DefaultPrefix).ReadSet(ctx)
	if err != nil || len(set.Leaders) != 1 || set.Leaders[0].Instance.Instance != "b" || set.Leaders[0].Token != tb.Token() {
		t.Fatalf("the operator's ReadSet: %+v, %v; want b leading with token %d", set, err, tb.Token())
	}
	go b.WatchResignRequests(ctx, func(job string, token int64) {
		if job == "report" && token == tb.Token() {
			tb.Resign(ctx)
		}
	})
	wa := campaign(a, "report")
	waitWaiting(t, a)
	_, after, err := leadership.Resign(ctx, kubelease.NewCluster(cli, ns, kubelease.DefaultPrefix), "report")
	if err != nil || after == nil || after.Instance != "a" {
		t.Fatalf("the operator's Resign: after %+v, %v; want a", after, err)
	}
	won(t, wa)
}
