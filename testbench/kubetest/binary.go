package kubetest

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/snip/snip-jobs/testbench/gobuild"
)

// Version is the kube-apiserver release the kit runs.
const Version = "v1.34.0"

const mainPkg = "k8s.io/kubernetes/cmd/kube-apiserver"

// Binary returns kube-apiserver of version, kept in <user
// cache>/snip-jobs/kube-apiserver-<version> and built there when missing
// or not that version (the first build takes about 10½ minutes and 2.1 GB of
// memory on two idle cores, measured 2026-12-02, far longer on a busy
// machine; every later run reuses it).
func Binary(ctx context.Context, version string) (string, error) {
	cache, err := gobuild.CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "kube-apiserver-"+version)
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
		Steps: [][]string{{"mod", "tidy"}, {"build", "-o", "OUT", mainPkg}},
		Check: check,
	}.Run(ctx)
}

// CachedBinary is Binary without the build: an error saying how to build
// it when the cache has no kube-apiserver of version.
func CachedBinary(ctx context.Context, version string) (string, error) {
	cache, err := gobuild.CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "kube-apiserver-"+version)
	if !gobuild.Cached(ctx, bin, IsVersion(version)) {
		return "", fmt.Errorf("no kube-apiserver %s at %s yet: go run ./cmd/snip-test --prepare-only builds it there once "+
			"(4 to 11 minutes and 2.1 GB of memory on two cores)", version, bin)
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
// apiserver, client-go…) released with kubernetes version: v1.34.0 → v0.34.0.
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
		"go.mod":   GoMod(version, StagingModules(string(kmod))),
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

// GoMod is the throwaway module's go.mod.
func GoMod(version string, staging []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "module kbuild\n\ngo 1.24\n\nrequire k8s.io/kubernetes %s\n\n", version)
	for _, m := range staging {
		fmt.Fprintf(&b, "replace %s => %s %s\n", m, m, stagingVersion(version))
	}
	return b.String()
}
