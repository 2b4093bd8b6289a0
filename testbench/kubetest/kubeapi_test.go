package kubetest_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/snip/snip-jobs/testbench/gobuild"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// The cached kube-apiserver is reused only when Go's build information says
// it is k8s.io/kubernetes's kube-apiserver at the version asked for: another
// version, or another program, is refused (and would be rebuilt).
func TestTheCachedBinaryIsCheckedForItsVersion(t *testing.T) {
	ctx := context.Background()
	version := kubetest.Selected()
	cache, err := gobuild.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(cache, "kube-apiserver-"+version)
	if _, err := os.Stat(bin); err != nil {
		if bin, err = kubetest.Binary(ctx, version); err != nil {
			t.Fatal(err)
		}
	}
	if err := kubetest.IsVersion(version)(ctx, bin); err != nil {
		t.Errorf("the cached %s is refused: %v", version, err)
	}
	if err := kubetest.IsVersion("v1.33.0")(ctx, bin); err == nil {
		t.Errorf("the cached %s binary passes as v1.33.0", version)
	}
	self, _ := os.Executable()
	if err := kubetest.IsVersion(version)(ctx, self); err == nil {
		t.Error("the test binary passes as kube-apiserver")
	}
	if err := kubetest.IsVersion(version)(ctx, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file passes")
	}
}

// SNIP_KUBE_APISERVER selects the release for a run; unset, the kit runs
// Version. A value that is not a Kubernetes release is refused before any
// build (it would name a cache file and a module version).
func TestTheReleaseIsSelectedByTheEnvironment(t *testing.T) {
	t.Setenv(kubetest.VersionEnv, "")
	if got := kubetest.Selected(); got != kubetest.Version {
		t.Errorf("unset: Selected() = %q, want %q", got, kubetest.Version)
	}
	t.Setenv(kubetest.VersionEnv, "v1.35.4")
	if got := kubetest.Selected(); got != "v1.35.4" {
		t.Errorf("%s=v1.35.4: Selected() = %q", kubetest.VersionEnv, got)
	}
	for _, bad := range []string{"1.35.4", "v0.35.4", "v1.35", "v1.35.4/../x", "latest"} {
		if _, err := kubetest.Binary(context.Background(), bad); err == nil {
			t.Errorf("Binary(%q) is accepted", bad)
		}
		if _, err := kubetest.CachedBinary(context.Background(), bad); err == nil {
			t.Errorf("CachedBinary(%q) is accepted", bad)
		}
	}
}

// The build recipe replaces every staging module that k8s.io/kubernetes's own
// go.mod points at a folder, with the staging release of the same version.
func TestTheBuildModuleReplacesEveryStagingModule(t *testing.T) {
	gomod := "module k8s.io/kubernetes\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n" +
		"\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n\tgithub.com/x/y => github.com/x/y v1.0.0\n)\n" +
		"replace k8s.io/kms => ./staging/src/k8s.io/kms\n"
	got := kubetest.StagingModules(gomod)
	if want := []string{"k8s.io/api", "k8s.io/client-go", "k8s.io/kms"}; !slices.Equal(got, want) {
		t.Fatalf("staging modules %v, want %v", got, want)
	}
	mod := kubetest.GoMod("v1.34.0", "1.24.0", got)
	for _, line := range []string{"\ngo 1.24.0\n", "require k8s.io/kubernetes v1.34.0", "replace k8s.io/api => k8s.io/api v0.34.0", "replace k8s.io/kms => k8s.io/kms v0.34.0"} {
		if !strings.Contains(mod, line) {
			t.Errorf("go.mod lacks %q:\n%s", line, mod)
		}
	}
}

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
	cs, err := kubernetes.NewForConfig(s.Config())
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

// For the real release, the build module requires k8s.io/kubernetes at the
// version and replaces the staging modules its go.mod names (read from the
// module cache or the proxy, as a build would), client-go and apiserver
// among them, each with its v0 release; its go line is the release's own
// (k8s.io/kubernetes v1.37.2 says go 1.26.0).
func TestTheBuildModuleOfTheReleaseReplacesItsStagingModules(t *testing.T) {
	if kubetest.Version != "v1.37.2" {
		t.Fatalf("Version is %s: update this test's expectations (written for v1.37.2)", kubetest.Version)
	}
	files, err := kubetest.BuildFiles(context.Background(), kubetest.Version)
	if err != nil {
		t.Fatal(err)
	}
	mod := files["go.mod"]
	for _, line := range []string{
		"\ngo 1.26.0\n",
		"require k8s.io/kubernetes v1.37.2",
		"replace k8s.io/client-go => k8s.io/client-go v0.37.2",
		"replace k8s.io/apiserver => k8s.io/apiserver v0.37.2",
		"replace k8s.io/api => k8s.io/api v0.37.2",
	} {
		if !strings.Contains(mod, line) {
			t.Errorf("go.mod lacks %q", line)
		}
	}
	if n := strings.Count(mod, "\nreplace "); n != 33 {
		t.Errorf("go.mod replaces %d modules; k8s.io/kubernetes v1.37.2 has 33 staging modules", n)
	}
	if !strings.Contains(files["tools.go"], `import _ "k8s.io/kubernetes/cmd/kube-apiserver"`) {
		t.Errorf("tools.go does not import kube-apiserver:\n%s", files["tools.go"])
	}
}
