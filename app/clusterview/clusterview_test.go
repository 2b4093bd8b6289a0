package clusterview_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/app/clusterview"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// On Kubernetes, the reader names a job's leader with its token and
// instance Lease, and counts an instance up while its renewTime is within
// its duration by the reader's clock (injected here) and it is not leaving:
// read an hour later, or after Deregister, the same Lease is listed not up.
func TestKubeReadsTheLeaderAndJudgesUpByRenewTime(t *testing.T) {
	ctx := context.Background()
	srv, err := kubetest.Start(ctx, kubetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cs, err := kubetest.NewClientset(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	const ns = "view"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := kubelease.NewSession(kubelease.Config{Client: cs.CoordinationV1(), Namespace: ns, Config: leadership.Config{Instance: "a", Logger: benchtest.Logger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	wctx, cancel := context.WithTimeout(ctx, benchtest.Patience)
	defer cancel()
	term, err := s.Campaign(wctx, "report")
	if err != nil {
		t.Fatal(err)
	}

	var at time.Time
	read := clusterview.Kube(cs.CoordinationV1(), ns, kubelease.DefaultPrefix, func() time.Time { return at })
	at = time.Now()
	l, err := read(ctx)
	ld, ok := l.Leaders["report"]
	if err != nil || l.Backend != "kubernetes" || !ok || ld.Instance != "a" || ld.Token != term.Token() || ld.Lease != "snip-jobs-instance-a" ||
		!strings.HasPrefix(ld.Holder, "a/") || ld.LeaseTTLSeconds != 0 || len(l.Instances) != 1 || !l.Instances[0].Up {
		t.Fatalf("read: %+v, %v", l, err)
	}
	in := l.Instances[0]
	if in.Name != "a" || in.Holder != ld.Holder || in.Renewed.IsZero() || in.LeaseGrantedSeconds != leadership.DefaultTTL.Seconds() {
		t.Errorf("instance %+v", in)
	}

	at = in.Renewed.Add(time.Hour)
	if l, err := read(ctx); err != nil || len(l.Instances) != 1 || l.Instances[0].Up || l.Leaders["report"].Instance != "a" {
		t.Errorf("read an hour after its renewal: %+v, %v; want a listed not up, still named leader", l, err)
	}
	if err := s.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	at = time.Now()
	if l, err := read(ctx); err != nil || len(l.Instances) != 1 || l.Instances[0].Up {
		t.Errorf("read after Deregister: %+v, %v; want a listed not up (leaving)", l, err)
	}
}
