// Package releases builds, from source and once, the released programs the
// test bench runs as processes beside the code under test: etcd's own server
// at a given release (the oldest supported of each line), and snip-jobs at
// an earlier commit of this repository (the previous release, for the
// rolling-upgrade test). Each is kept in the user cache folder
// (gobuild.CacheDir) and reused. Only the standard library and gobuild:
// testbench/prepare starts these builds before anything else is compiled.
//
// Test-only: the production binary must not import it.
package releases

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/snip/snip-jobs/testbench/gobuild"
)

// buildTimeout bounds one build (a first build of etcd takes about half a
// minute on two idle cores, the previous release about ten seconds).
const buildTimeout = 5 * time.Minute

// Etcd returns an etcd server binary of version ("3.5.23"), built with
// `go build go.etcd.io/etcd/server/v3` at that version in a throwaway module
// (the module proxy or the module cache supplies the source) into
// <user cache>/snip-jobs/etcd-<version>/etcd, or that file when an earlier
// run built it. The server module's main package is etcd's own main.
func Etcd(ctx context.Context, version string) (string, error) {
	cache, err := gobuild.CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "etcd-"+version, "etcd")
	check := gobuild.VersionSays("etcd Version: " + version)
	if gobuild.Cached(ctx, bin, check) {
		return bin, nil
	}
	mod := fmt.Sprintf("module etcdbuild\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 v%s\n", version)
	return bin, gobuild.Build{
		Bin: bin, Files: map[string]string{"go.mod": mod},
		Steps: [][]string{append(append([]string{"build"}, gobuild.Lean...), "-o", "OUT", "go.etcd.io/etcd/server/v3")},
		Check: check, Timeout: buildTimeout,
	}.Run(ctx)
}

// Etcdctl returns etcd's own command-line client of version ("3.7.0"),
// built as Etcd builds the server (module go.etcd.io/etcd/etcdctl/v3) into
// <user cache>/snip-jobs/etcdctl-<version>/etcdctl: the anchor the exec job
// is measured against (`etcdctl lock NAME -- CMD`).
func Etcdctl(ctx context.Context, version string) (string, error) {
	cache, err := gobuild.CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "etcdctl-"+version, "etcdctl")
	check := func(ctx context.Context, path string) error { // etcdctl says its version as a command, not a flag
		out, err := exec.CommandContext(ctx, path, "version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "etcdctl version: "+version) {
			return fmt.Errorf("%s version does not say %q (err %v):\n%s", path, version, err, out)
		}
		return nil
	}
	if gobuild.Cached(ctx, bin, check) {
		return bin, nil
	}
	mod := fmt.Sprintf("module etcdctlbuild\n\ngo 1.24\n\nrequire go.etcd.io/etcd/etcdctl/v3 v%s\n", version)
	return bin, gobuild.Build{
		Bin: bin, Files: map[string]string{"go.mod": mod},
		Steps: [][]string{append(append([]string{"build"}, gobuild.Lean...), "-o", "OUT", "go.etcd.io/etcd/etcdctl/v3")},
		Check: check, Timeout: buildTimeout,
	}.Run(ctx)
}

// Previous is the commit of this repository's previous release: the
// parent of the commit that added the newest migration (migrations/*.sql), so
// that upgrading from it applies a migration. It fails, saying so, when the
// history is not there (a shallow clone, or no git checkout).
func Previous(ctx context.Context) (string, error) {
	root, err := gobuild.ModuleRoot()
	if err != nil {
		return "", err
	}
	return previous(ctx, root)
}

func previous(ctx context.Context, root string) (string, error) {
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	const fetch = "the rolling-upgrade test builds the previous release from this repository's git history; " +
		"run it in a full clone (git fetch --unshallow)"
	added, err := git("log", "--diff-filter=A", "-1", "--format=%H", "--", "migrations/*.sql")
	if err != nil || added == "" {
		return "", fmt.Errorf("no commit adding a migration found in %s (%v: %s): %s", root, err, added, fetch)
	}
	parent, err := git("rev-parse", "--verify", "--quiet", added+"^")
	if err != nil || parent == "" {
		shallow, _ := git("rev-parse", "--is-shallow-repository")
		return "", fmt.Errorf("the parent of %s (which added the newest migration) is not in this clone (shallow: %s): %s", added, shallow, fetch)
	}
	return parent, nil
}

// SnipJobs returns snip-jobs built from commit of this repository (git
// archive into a temporary folder, go build), kept in <user
// cache>/snip-jobs/release-<commit>/snip-jobs and reused.
func SnipJobs(ctx context.Context, commit string) (string, error) {
	cache, err := gobuild.CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "release-"+commit, "snip-jobs")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	root, err := gobuild.ModuleRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	src, err := os.MkdirTemp(filepath.Dir(bin), "src-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %w\n%s", commit, err, out)
	}
	out := filepath.Join(src, "snip-jobs.out")
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	if _, err := gobuild.Go(ctx, src, "build", "-o", out, "./cmd/snip-jobs"); err != nil {
		return "", err
	}
	return bin, gobuild.Install(ctx, out, bin, nil)
}
