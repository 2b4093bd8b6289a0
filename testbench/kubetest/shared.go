package kubetest

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	coreclient "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// The server shared by a test binary (Shared): started on first use,
// closed by benchtest.RunMain.
var shared struct {
	mu  sync.Mutex
	srv *Server
	err error // the first start's failure, reported to every later caller
}

// Shared returns the kube-apiserver shared by the test binary, started with
// the default Options on first use and closed by benchtest.RunMain once the
// package's tests are over (the package needs
// func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }). The tests
// sharing it must not stop it, and each works in a namespace of its own
// (Namespace).
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.err = Start(context.Background(), Options{})
		if shared.err == nil {
			if shared.err = benchtest.AfterTests(shared.srv.Close); shared.err != nil {
				shared.srv.Close()
				shared.srv = nil
			}
		}
	}
	if shared.err != nil {
		t.Fatalf("kubetest: shared kube-apiserver: %v", shared.err)
	}
	return shared.srv
}

// Namespace creates a namespace for t on the server, named after the test
// with a generated suffix (so that -count=N runs it again on the same
// server), and returns its name.
func (s *Server) Namespace(t testing.TB) string {
	t.Helper()
	name := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 50 {
		name = strings.TrimLeft(name[len(name)-50:], "-")
	}
	cli, err := coreclient.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cli.Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: create a namespace for %s: %v", t.Name(), err)
	}
	return ns.Name
}

// WaitLeases waits until cond holds, checking it once and again at each
// change to the Leases of namespace the API server reports (a watch from
// the resourceVersion of a List made before the first check, so no change is
// missed): the API server signals, the test does not poll. A watch that
// ends is opened again and cond checked anew. It fails the test naming what
// it waited for once benchtest.Patience has passed.
func WaitLeases(t testing.TB, cli coordclient.LeasesGetter, namespace, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	for ctx.Err() == nil {
		if waitLeasesOnce(ctx, cli, namespace, cond) {
			return
		}
		sleep.For(ctx, 50*time.Millisecond) // not a poll of cond: a pause before watching again
	}
	t.Fatalf("waiting for %s: no change to the Leases of namespace %s made it hold within %v", what, namespace, benchtest.Patience)
}

// waitLeasesOnce waits on one watch; false if it could not be opened or
// ended first.
func waitLeasesOnce(ctx context.Context, cli coordclient.LeasesGetter, namespace string, cond func() bool) bool {
	list, err := cli.Leases(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	w, err := cli.Leases(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return false
	}
	defer w.Stop()
	for !cond() {
		if ev, ok := <-w.ResultChan(); !ok || ev.Type == watch.Error {
			return false
		}
	}
	return true
}
