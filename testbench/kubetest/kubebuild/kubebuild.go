// Package kubebuild builds the tests' kube-apiserver from the Kubernetes
// release's source (k8s.io/kubernetes through the Go module proxy) into the
// user cache, once, and checks a cached one by the build information Go
// embeds. Only the standard library and gobuild: testbench/prepare starts
// this build before anything else is compiled.
//
// Test-only: the production binary must not import it.
package kubebuild

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/snip/snip-jobs/testbench/gobuild"
)

// Version is the kube-apiserver release the kit runs by default: the
// newest supported Kubernetes minor (1.35–1.37 in December 2026), the
// release of the client-go in go.mod.
const Version = "v1.37.2"

// VersionEnv names the environment variable that selects another release
// for one run (SNIP_KUBE_APISERVER=v1.35.4: the oldest supported minor,
// which .ci/run tests the backend against too). It is built into the
// cache the same way.
const VersionEnv = "SNIP_KUBE_APISERVER"

// Selected is the release this run uses: VersionEnv's value when set, else
// Version. kubetest.Start and testbench/prepare use it; a value that is not a
// Kubernetes release (v1.N.M) is refused by Binary.
func Selected() string {
	if v := strings.TrimSpace(os.Getenv(VersionEnv)); v != "" {
		return v
	}
	return Version
}

var releaseRE = regexp.MustCompile(`^v1\.[0-9]+\.[0-9]+$`)

// checkRelease refuses a version that cannot name a k8s.io/kubernetes
// release (whose staging modules are v0.N.M).
func checkRelease(version string) error {
	if !releaseRE.MatchString(version) {
		return fmt.Errorf("kube-apiserver version %q is not a Kubernetes release such as %s (%s)", version, Version, VersionEnv)
	}
	return nil
}

const mainPkg = "k8s.io/kubernetes/cmd/kube-apiserver"

// Binary returns kube-apiserver of version, kept in <user
// cache>/snip-jobs/kube-apiserver-<version> and built there when missing
// or not that version (the first build of v1.37.2 took 511 s of wall time,
// 631 s of CPU and 2.7 GiB of memory at most on two busy cores, v1.35.4's
// 470 s, 505 s and 2.1 GiB, measured 2026-12-03; far longer at a low
// priority on a busier machine; every later run reuses it).
func Binary(ctx context.Context, version string) (string, error) {
	bin, err := cachePath(version)
	if err != nil {
		return "", err
	}
	check := IsVersion(version)
	if gobuild.Cached(ctx, bin, check) {
		return bin, nil
	}
	files, err := buildFiles(ctx, version)
	if err != nil {
		return "", err
	}
	return bin, gobuild.Build{
		Bin: bin, Files: files,
		Steps: [][]string{{"mod", "tidy"}, append(append([]string{"build"}, gobuild.Lean...), "-o", "OUT", mainPkg)},
		Check: check,
	}.Run(ctx)
}

// cachePath is where the kube-apiserver of version is kept; a version that
// is not a Kubernetes release is refused (it would name the file).
func cachePath(version string) (string, error) {
	if err := checkRelease(version); err != nil {
		return "", err
	}
	cache, err := gobuild.CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "kube-apiserver-"+version), nil
}

// CachedBinary is Binary without the build: an error saying how to build
// it when the cache has no kube-apiserver of version.
func CachedBinary(ctx context.Context, version string) (string, error) {
	bin, err := cachePath(version)
	if err != nil {
		return "", err
	}
	if !gobuild.Cached(ctx, bin, IsVersion(version)) {
		return "", fmt.Errorf("no kube-apiserver %s at %s yet: go run ./testbench/cmd/snip-test --prepare-only builds it there once "+
			"(about 9 minutes and 2.7 GiB of memory on two cores)", version, bin)
	}
	return bin, nil
}

// IsVersion checks that a binary is kube-apiserver built from
// k8s.io/kubernetes at version. It reads the build information Go embeds
// (`go version -m`), because a binary built with plain `go build` answers
// --version with "v0.0.0-master" (the release's version is set by
// Kubernetes' own build scripts through -ldflags).
func IsVersion(version string) gobuild.Check {
	return func(_ context.Context, path string) error {
		bi, err := buildinfo.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s: no Go build information: %w", path, err)
		}
		if bi.Path != mainPkg {
			return fmt.Errorf("%s is %q, not %s", path, bi.Path, mainPkg)
		}
		if bi.Main.Path != "k8s.io/kubernetes" || bi.Main.Version != version {
			return fmt.Errorf("%s is built from %s %s, not k8s.io/kubernetes %s", path, bi.Main.Path, bi.Main.Version, version)
		}
		staging := stagingVersion(version)
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/apiserver" && (d.Replace == nil || d.Replace.Version != staging) && d.Version != staging {
				return fmt.Errorf("%s links k8s.io/apiserver %s, not %s", path, d.Version, staging)
			}
		}
		return nil
	}
}

// stagingVersion is the version of the staging modules (k8s.io/api,
// apiserver, client-go…) released with kubernetes version: v1.37.2 → v0.37.2.
func stagingVersion(version string) string {
	return "v0." + strings.TrimPrefix(version, "v1.")
}

// buildFiles is the throwaway module that builds kube-apiserver: k8s.io/kubernetes
// replaces its staging modules with folders its module zip does not carry,
// so the module requires it and replaces every one of them with its release.
func buildFiles(ctx context.Context, version string) (map[string]string, error) {
	dir, err := os.MkdirTemp("", "kubeapi-mod-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out, err := gobuild.Go(ctx, dir, "mod", "download", "-json", "k8s.io/kubernetes@"+version)
	if err != nil {
		return nil, err
	}
	var dl struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &dl); err != nil || dl.Error != "" {
		return nil, fmt.Errorf("go mod download k8s.io/kubernetes@%s: %v %s", version, err, dl.Error)
	}
	kmod, err := os.ReadFile(dl.GoMod)
	if err != nil {
		return nil, err
	}
	return map[string]string{
		"go.mod":   GoMod(version, GoLine(string(kmod)), StagingModules(string(kmod))),
		"tools.go": "//go:build tools\n\npackage kbuild\n\nimport _ \"" + mainPkg + "\"\n",
	}, nil
}

// StagingModules lists the modules that k8s.io/kubernetes's go.mod (its text)
// replaces with a folder under ./staging.
func StagingModules(gomod string) []string {
	var mods []string
	sc := bufio.NewScanner(strings.NewReader(gomod))
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "replace "))
		if len(f) == 3 && f[1] == "=>" && strings.HasPrefix(f[2], "./staging/") {
			mods = append(mods, f[0])
		}
	}
	return mods
}

// GoLine is the Go version k8s.io/kubernetes's go.mod (its text) names
// ("1.26.0"), or "" when it names none.
func GoLine(gomod string) string {
	sc := bufio.NewScanner(strings.NewReader(gomod))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "go" {
			return f[1]
		}
	}
	return ""
}

// GoMod is the throwaway module's go.mod. Its go line is the release's own
// (goVersion; 1.24 when empty), so that the binary gets the GODEBUG
// defaults the release was built with: a main module's go line sets them,
// a dependency's does not.
func GoMod(version, goVersion string, staging []string) string {
	if goVersion == "" {
		goVersion = "1.24"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "module kbuild\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\n", goVersion, version)
	for _, m := range staging {
		fmt.Fprintf(&b, "replace %s => %s %s\n", m, m, stagingVersion(version))
	}
	return b.String()
}

// Versions are the kube-apiserver releases the suite runs (Selected), for what
// prepares the cache before it (testbench/prepare).
func Versions() []string { return []string{Selected()} }
