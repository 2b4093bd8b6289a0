package kubelease_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/kubemanifest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// Under RBAC, the service account of deploy/kubernetes, bound to the Role
// of role.yaml by rolebinding.yaml (the files, moved into the test's
// namespace as kustomize would), can do everything the backend needs (take,
// renew, hand over, resign, delete at Close; watch and patch, checked by
// hand), and is refused Leases in another namespace and the other
// resources of its own (Secrets, Pods, ConfigMaps), so the allowance is
// real and confined. Each verb of the Role is needed (tried by hand, one
// removed at a time): without get, list, create or delete this test fails
// in the sessions; without update the sessions cannot renew (and Resign is
// refused: TestAReleaseTheAPIServerForbidsIsNotTriedAgain); without watch or patch, in usesWatchAndPatch. An operator allowed
// only get, list and patch there can read the leaders (snip-jobs status) and
// have one resign (snip-jobs resign).
func TestTheRoleOfTheManifestsLetsTheirServiceAccountLeadAndNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const opToken = "operator-token"
	srv, err := kubetest.Start(ctx, kubetest.Options{RBAC: true, ExtraTokens: []string{opToken + ",operator,operator-uid"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ns := namespace(t, srv)
	admin := clientset(t, srv.Config())
	token := manifestsAccount(t, admin, ns)
	allow(t, admin, ns, "operator", "get", "list", "patch")
	refused(t, clientset(t, srv.TokenConfig(token)), ns)
	usesWatchAndPatch(t, admin, clientset(t, srv.TokenConfig(token)), ns)
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

// manifestsAccount creates the ServiceAccount, the Role and the RoleBinding
// of deploy/kubernetes in ns, as written but for the namespace, and returns
// a token of the account (TokenRequest, as the kubelet gets a pod's).
func manifestsAccount(t *testing.T, admin *kubetest.Clientset, ns string) string {
	t.Helper()
	ctx := context.Background()
	dir, err := kubemanifest.Dir()
	if err != nil {
		t.Fatal(err)
	}
	set, err := kubemanifest.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	set = set.InNamespace(ns)
	var (
		sa      corev1.ServiceAccount
		role    rbacv1.Role
		binding rbacv1.RoleBinding
	)
	for kind, into := range map[string]any{"ServiceAccount": &sa, "Role": &role, "RoleBinding": &binding} {
		o, err := set.Only(kind)
		if err == nil {
			err = o.Typed(into)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of service account %s: %v", sa.Name, err)
	}
	return tr.Status.Token
}

// refused checks that user may not read Leases in another namespace, nor
// Secrets, Pods or ConfigMaps in ns.
func refused(t *testing.T, user *kubetest.Clientset, ns string) {
	t.Helper()
	ctx := context.Background()
	if _, err := user.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Leases in another namespace: %v, want forbidden", err)
	}
	if _, err := user.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Secrets in its namespace: %v, want forbidden", err)
	}
	if _, err := user.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Pods in its namespace: %v, want forbidden", err)
	}
	if _, err := user.CoreV1().ConfigMaps(ns).Get(ctx, "snip-jobs-config", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reading a ConfigMap in its namespace: %v, want forbidden", err)
	}
	if _, err := user.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing Leases in its namespace: %v, want allowed", err)
	}
}

// usesWatchAndPatch checks the two verbs the sessions above would do
// without: a session whose watch is refused falls back to listing the set
// every quarter renew interval, without a word, and patch is snip-jobs
// resign's request, made with the pod's account when run in a pod (kubectl
// exec). The account may open a watch of its namespace's Leases, and patch
// one.
func usesWatchAndPatch(t *testing.T, admin, user *kubetest.Clientset, ns string) {
	t.Helper()
	ctx := context.Background()
	w, err := user.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("watching Leases in its namespace: %v, want allowed", err)
	} else {
		w.Stop()
	}
	if _, err := admin.CoordinationV1().Leases(ns).Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "patched"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"jobs.snip.dev/test":"patched"}}}`)
	if _, err := user.CoordinationV1().Leases(ns).Patch(ctx, "patched", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("patching a Lease in its namespace: %v, want allowed", err)
	}
}

// A term whose account may not update its job Lease (every other verb, and
// update of its own instance Lease alone) wins by creating the Lease; its
// Resign, refused by the API server, returns at once with ErrRefused rather
// than trying again until its context ends.
func TestAReleaseTheAPIServerForbidsIsNotTriedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const token = "no-job-updates"
	srv, err := kubetest.Start(ctx, kubetest.Options{RBAC: true, ExtraTokens: []string{token + ",snip,snip-uid"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ns := namespace(t, srv)
	admin := clientset(t, srv.Config())
	allow(t, admin, ns, "snip", "get", "list", "watch", "create", "patch", "delete")
	grant(t, admin, ns, "snip-own-instance", "snip", rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		Verbs: []string{"update"}, ResourceNames: []string{kubelease.DefaultPrefix + "-instance-a"}})
	a := start(t, srv, ns, "a", asToken(token))
	ta := won(t, campaign(a, "report"))
	rctx, cancel := context.WithTimeout(ctx, benchtest.Patience)
	defer cancel()
	if err := ta.Resign(rctx); !errors.Is(err, leadership.ErrRefused) || rctx.Err() != nil {
		t.Fatalf("Resign of a term whose account may not update its job Lease: %v (context: %v); want ErrRefused at once", err, rctx.Err())
	}
}

// An account that may not watch Leases still leads (the observer lists
// instead), and the session says so, as a warning naming the fix.
func TestARefusedWatchIsSaidAndTheSessionStillLeads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const token = "no-watch"
	srv, err := kubetest.Start(ctx, kubetest.Options{RBAC: true, ExtraTokens: []string{token + ",snip,snip-uid"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ns := namespace(t, srv)
	allow(t, clientset(t, srv.Config()), ns, "snip", "get", "list", "create", "update", "patch", "delete")
	warned := &firstWarning{prefix: "the API server refuses to watch", seen: make(chan slog.Record, 8)}
	logTo := func(c *kubelease.Config, _ *rest.Config) { c.Logger = slog.New(warned) }
	a := start(t, srv, ns, "a", asToken(token), logTo)
	won(t, campaign(a, "report"))
	select {
	case r := <-warned.seen:
		if !strings.Contains(r.Message, "role.yaml") {
			t.Errorf("the warning does not say what to grant: %q", r.Message)
		}
	case <-time.After(benchtest.Patience):
		t.Fatal("no warning that the watch is refused")
	}
}

// firstWarning passes on the warnings whose message starts with prefix.
type firstWarning struct {
	prefix string
	seen   chan slog.Record
}

func (w *firstWarning) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *firstWarning) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, w.prefix) {
		select {
		case w.seen <- r:
		default:
		}
	}
	return nil
}
func (w *firstWarning) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *firstWarning) WithGroup(string) slog.Handler      { return w }

// allow grants user verbs on Leases in ns.
func allow(t *testing.T, admin *kubetest.Clientset, ns, user string, verbs ...string) {
	t.Helper()
	grant(t, admin, ns, "leases-"+user, user, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs})
}

// grant makes a Role named name with rule and binds it to user, in ns.
func grant(t *testing.T, admin *kubetest.Clientset, ns, name, user string, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	_, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{rule},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
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
