// Package gobuild builds Go programs that the test bench runs as processes
// (older etcd servers, released snip-jobs, kube-apiserver) into a cache folder
// outside the repository, once, and hands back the cached binary after.
//
// What is guaranteed: a binary is moved into place only after its check
// passed, and by rename, so a concurrent run sees the old file or the new
// one, never half of one. What is NOT: that two runs do not both build (each
// builds in a folder of its own and the last rename wins); that a cached
// binary is what its name says, beyond what the caller's check looks at.
//
// Test-only: the production binary must not import it.
package gobuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/snip/snip-jobs/testbench/flock"
)

// CacheDir is where built binaries are kept between runs: outside the
// repository, so that a fresh clone reuses them.
func CacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache folder for built binaries: %w", err)
	}
	return filepath.Join(base, "snip-jobs"), nil
}

// ModuleRoot finds the snip-jobs module's folder: the working directory or
// one above it.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/snip/snip-jobs\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("run inside the snip-jobs module (no go.mod of github.com/snip/snip-jobs in %s or above): it builds snip-jobs from source", dir)
		}
	}
}

// Lean are go build's flags for a released program the tests run but never
// debug (etcd, kube-apiserver): no DWARF compiled or linked, no symbol table,
// no build paths. Less for a fresh machine to compile and link; the build
// information that checks identify a binary by is kept.
var Lean = []string{"-trimpath", "-ldflags=-s -w", "-gcflags=all=-dwarf=false"}

// Check verifies a built (or cached) binary at path; nil means it is the one wanted.
type Check func(ctx context.Context, path string) error

// VersionSays is a Check that `path --version` prints want.
func VersionSays(want string) Check {
	return func(ctx context.Context, path string) error {
		out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			return fmt.Errorf("%s --version does not say %q (err %v):\n%s", path, want, err, out)
		}
		return nil
	}
}

// Cached reports whether bin exists and passes check.
func Cached(ctx context.Context, bin string, check Check) bool {
	if _, err := os.Stat(bin); err != nil {
		return false
	}
	return check == nil || check(ctx, bin) == nil
}

// Build is a program built in a throwaway module.
type Build struct {
	// Bin is where the binary ends up.
	Bin string
	// Files are written into a fresh folder beside Bin (go.mod, tools.go…).
	Files map[string]string
	// Steps are go commands run in that folder in order; an argument "OUT" is
	// replaced by the path the last step must write the binary to.
	Steps [][]string
	// Check verifies the result before it replaces Bin (nil: none).
	Check Check
	// Timeout bounds the whole build (0: none beyond ctx).
	Timeout time.Duration
}

// Run builds b.Bin; the work folder is removed afterwards.
func (b Build) Run(ctx context.Context) error {
	if b.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.Timeout)
		defer cancel()
	}
	if err := os.MkdirAll(filepath.Dir(b.Bin), 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Dir(b.Bin), filepath.Base(b.Bin)+".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	for f, content := range b.Files {
		if err := os.WriteFile(filepath.Join(work, f), []byte(content), 0o644); err != nil {
			return err
		}
	}
	out := filepath.Join(work, "out")
	for _, step := range b.Steps {
		args := make([]string, len(step))
		for i, a := range step {
			args[i] = a
			if a == "OUT" {
				args[i] = out
			}
		}
		if _, err := Go(ctx, work, args...); err != nil {
			return err
		}
	}
	return Install(ctx, out, b.Bin, b.Check)
}

// Go runs go with args in dir, in module mode without a workspace, and
// returns its standard output.
func Go(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return b, nil
}

// Install checks the binary out and renames it to bin (atomically).
func Install(ctx context.Context, out, bin string, check Check) error {
	if check != nil {
		if err := check(ctx, out); err != nil {
			return fmt.Errorf("the binary built at %s is not the one wanted: %w", out, err)
		}
	}
	return os.Rename(out, bin)
}

// Shared builds the main package in pkgDir (an absolute folder of the module
// being tested), without debug information, into a folder of the temporary
// directory that every test process of that checkout shares, and returns the
// binary's path. Builds take turns under a lock, and `go build -o` skips the
// link when the binary there is up to date: the test binaries of one
// `go test ./...` that run the same command link it once (~5 s of a core
// each) rather than each its own copy. A changed source is linked again; a
// process already running the old binary keeps it (go build renames the new
// one into place). flags go to go build (an -overlay, for one): a build with
// other flags needs a name of its own.
func Shared(ctx context.Context, pkgDir, name string, flags ...string) (string, error) {
	sum := sha256.Sum256([]byte(pkgDir))
	dir := filepath.Join(os.TempDir(), "snip-jobs-bin-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	unlock, err := flock.Lock(ctx, bin+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	args := append([]string{"build", "-o", bin, "-ldflags=-s -w"}, flags...)
	cmd := exec.CommandContext(ctx, "go", append(args, ".")...)
	cmd.Dir = pkgDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkgDir, err, out)
	}
	return bin, nil
}
