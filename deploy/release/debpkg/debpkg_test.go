package debpkg_test

import (
	"os/exec"
	"slices"
	"testing"

	"golang.org/x/mod/semver"

	"github.com/snip/snip-jobs/deploy/release/debpkg"
)

// Debian versions made from Go versions sort as Go sorts the Go versions,
// by dpkg's own comparison; "+dirty" sorts after the same version without.
func TestDebianVersionsSortAsGoVersions(t *testing.T) {
	t.Parallel()
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Fatalf("dpkg compares the versions: %v", err)
	}
	versions := []string{
		"v0.0.0-20261201000000-aaaaaaaaaaaa", "v0.0.0-20261207133005-3af69f95f82f", "v0.0.0-20261207143250-93ef996c0eb5",
		"v0.1.0", "v1.0.0-1", "v1.0.0-alpha", "v1.0.0-alpha.1", "v1.0.0-rc.2", "v1.0.0-rc.2.0.20261207143250-93ef996c0eb5",
		"v1.0.0-rc.10", "v1.0.0", "v1.0.1-0.20261207143250-93ef996c0eb5", "v1.0.1", "v1.2.0", "v1.10.0", "v2.0.0",
	}
	sorted := slices.Clone(versions)
	slices.SortFunc(sorted, semver.Compare)
	if !slices.Equal(sorted, versions) {
		t.Fatalf("the test's versions are not in Go's order: %v", sorted)
	}
	less := func(a, b string) {
		t.Helper()
		if out, err := exec.Command(dpkg, "--compare-versions", a, "lt", b).CombinedOutput(); err != nil {
			t.Errorf("dpkg: %s is not lower than %s (%v %s)", a, b, err, out)
		}
	}
	for i := 1; i < len(versions); i++ {
		less(debpkg.DebianVersion(versions[i-1]), debpkg.DebianVersion(versions[i]))
	}
	for _, v := range versions {
		less(debpkg.DebianVersion(v), debpkg.DebianVersion(v+"+dirty"))
	}
	if got := debpkg.DebianVersion("v0.0.0-20261207143250-93ef996c0eb5"); got != "0.0.0~20261207143250.93ef996c0eb5" {
		t.Errorf("DebianVersion of a pseudo-version: %s", got)
	}
}
