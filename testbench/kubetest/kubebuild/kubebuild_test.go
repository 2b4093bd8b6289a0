package kubebuild_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/testbench/gobuild"
	"github.com/snip/snip-jobs/testbench/kubetest/kubebuild"
)

// The cached kube-apiserver is reused only when Go's build information says
// it is k8s.io/kubernetes's kube-apiserver at the version asked for: another
// version, or another program, is refused (and would be rebuilt).
func TestTheCachedBinaryIsCheckedForItsVersion(t *testing.T) {
	ctx := context.Background()
	version := kubebuild.Selected()
	cache, err := gobuild.CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(cache, "kube-apiserver-"+version)
	if _, err := os.Stat(bin); err != nil {
		if bin, err = kubebuild.Binary(ctx, version); err != nil {
			t.Fatal(err)
		}
	}
	if err := kubebuild.IsVersion(version)(ctx, bin); err != nil {
		t.Errorf("the cached %s is refused: %v", version, err)
	}
	if err := kubebuild.IsVersion("v1.33.0")(ctx, bin); err == nil {
		t.Errorf("the cached %s binary passes as v1.33.0", version)
	}
	self, _ := os.Executable()
	if err := kubebuild.IsVersion(version)(ctx, self); err == nil {
		t.Error("the test binary passes as kube-apiserver")
	}
	if err := kubebuild.IsVersion(version)(ctx, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file passes")
	}
}

// SNIP_KUBE_APISERVER selects the release for a run; unset, the kit runs
// Version. A value that is not a Kubernetes release is refused before any
// build (it would name a cache file and a module version).
func TestTheReleaseIsSelectedByTheEnvironment(t *testing.T) {
	t.Setenv(kubebuild.VersionEnv, "")
	if got := kubebuild.Selected(); got != kubebuild.Version {
		t.Errorf("unset: Selected() = %q, want %q", got, kubebuild.Version)
	}
	t.Setenv(kubebuild.VersionEnv, "v1.35.4")
	if got := kubebuild.Selected(); got != "v1.35.4" {
		t.Errorf("%s=v1.35.4: Selected() = %q", kubebuild.VersionEnv, got)
	}
	for _, bad := range []string{"1.35.4", "v0.35.4", "v1.35", "v1.35.4/../x", "latest"} {
		if _, err := kubebuild.Binary(context.Background(), bad); err == nil {
			t.Errorf("Binary(%q) is accepted", bad)
		}
		if _, err := kubebuild.CachedBinary(context.Background(), bad); err == nil {
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
	got := kubebuild.StagingModules(gomod)
	if want := []string{"k8s.io/api", "k8s.io/client-go", "k8s.io/kms"}; !slices.Equal(got, want) {
		t.Fatalf("staging modules %v, want %v", got, want)
	}
	mod := kubebuild.GoMod("v1.34.0", "1.24.0", got)
	for _, line := range []string{"\ngo 1.24.0\n", "require k8s.io/kubernetes v1.34.0", "replace k8s.io/api => k8s.io/api v0.34.0", "replace k8s.io/kms => k8s.io/kms v0.34.0"} {
		if !strings.Contains(mod, line) {
			t.Errorf("go.mod lacks %q:\n%s", line, mod)
		}
	}
}

// For the real release, the build module requires k8s.io/kubernetes at the
// version and replaces the staging modules its go.mod names (read from the
// module cache or the proxy, as a build would), client-go and apiserver
// among them, each with its v0 release; its go line is the release's own
// (k8s.io/kubernetes v1.37.2 says go 1.26.0).
func TestTheBuildModuleOfTheReleaseReplacesItsStagingModules(t *testing.T) {
	if kubebuild.Version != "v1.37.2" {
		t.Fatalf("Version is %s: update this test's expectations (written for v1.37.2)", kubebuild.Version)
	}
	files, err := kubebuild.BuildFiles(context.Background(), kubebuild.Version)
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
