package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/snip/snip-jobs/testbench/kubemanifest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// Every object of the kustomization is accepted by a real kube-apiserver:
// its Namespace created for real (with the file's Pod Security labels: the
// restricted level enforced), every other object created with dryRun=All
// and strict field validation (a misspelt or misplaced field is an error,
// not dropped), then a Pod made of the Deployment's template, dry-run too,
// which the API server's Pod Security admission checks at the restricted
// level. Any warning the server sends back (a deprecated API, a pod
// template that would violate the namespace's level) fails the test.
func TestEveryManifestIsAcceptedByARealKubeAPIServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := kubetest.Shared(t)
	warned := &warnings{}
	cfg := rest.CopyConfig(srv.Config())
	cfg.WarningHandler = warned
	dyn, mapper := dynamicClient(t, cfg)

	set := load(t).InNamespace(freshNamespace(t))
	create := func(o *unstructured.Unstructured, dryRun bool) {
		t.Helper()
		m, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
		if err != nil {
			t.Fatalf("%s %s: the API server does not serve it: %v", o.GetKind(), o.GetName(), err)
		}
		ri := dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		if m.Scope.Name() == meta.RESTScopeNameRoot {
			ri = dyn.Resource(m.Resource)
		}
		opts := metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if _, err := ri.Create(ctx, o, opts); err != nil {
			t.Errorf("%s %s refused: %v", o.GetKind(), o.GetName(), err)
		}
	}
	ns, err := set.Only("Namespace")
	if err != nil {
		t.Fatal(err)
	}
	create(ns.Unstructured, false)
	for _, o := range set.Objects {
		if o.GetKind() != "Namespace" {
			create(o.Unstructured, true)
		}
	}
	// The ServiceAccount admission plugin refuses a pod whose account does
	// not exist: create it for real, then the pod, dry-run.
	sa, err := set.Only("ServiceAccount")
	if err != nil {
		t.Fatal(err)
	}
	create(sa.Unstructured, false)
	create(podOf(t, set), true)
	for _, w := range warned.all() {
		t.Errorf("the API server warned: %s", w)
	}
}

// podOf is a Pod made of the Deployment's template, as its ReplicaSet makes
// them.
func podOf(t *testing.T, set *kubemanifest.Set) *unstructured.Unstructured {
	t.Helper()
	d, err := set.Only("Deployment")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, ok, _ := unstructured.NestedMap(d.Object, "spec", "template")
	if !ok {
		t.Fatalf("Deployment %s has no spec.template", d.GetName())
	}
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "spec": tmpl["spec"]}}
	if md, ok := tmpl["metadata"].(map[string]any); ok {
		pod.Object["metadata"] = md
	}
	pod.SetName(d.GetName() + "-template")
	pod.SetNamespace(d.GetNamespace())
	return pod
}

// freshNamespace is a namespace name of the test's own (not created).
func freshNamespace(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	return "manifests-" + hex.EncodeToString(b)
}

// dynamicClient is a dynamic client of cfg and a mapper from kinds to
// resources, from the API server's discovery.
func dynamicClient(t *testing.T, cfg *rest.Config) (*dynamic.DynamicClient, meta.RESTMapper) {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn, restmapper.NewDiscoveryRESTMapper(groups)
}

// warnings collects the Warning headers of the API server's answers.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, strings.TrimSpace(text))
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}
