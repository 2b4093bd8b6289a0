package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// cacheDir is where built binaries are kept between runs: outside the
// repository, so that a fresh clone reuses them.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache folder for built binaries: %w", err)
	}
	return filepath.Join(base, "snip-jobs"), nil
}

// BuildEtcd returns an etcd server binary of version ("3.5.23"), built with
// `go build go.etcd.io/etcd/server/v3` at that version in a throwaway module
// (the module proxy or the module cache supplies the source) into
// <user cache>/snip-jobs/etcd-<version>/etcd, or that file when an earlier
// run built it. The server module's main package is etcd's own main.
func BuildEtcd(ctx context.Context, version string) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "etcd-"+version, "etcd")
	if ok, err := reports(ctx, bin, "etcd Version: "+version); ok || err != nil {
		return bin, err
	}
	mod := fmt.Sprintf("module etcdbuild\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 v%s\n", version)
	return bin, buildInto(ctx, bin, "etcd-"+version, map[string]string{"go.mod": mod},
		[]string{"build", "-o", "OUT", "go.etcd.io/etcd/server/v3"}, "etcd Version: "+version)
}

// reports reports whether bin exists and `bin --version` prints want.
func reports(ctx context.Context, bin, want string) (bool, error) {
	if _, err := os.Stat(bin); err != nil {
		return false, nil
	}
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	return err == nil && strings.Contains(string(out), want), nil
}

// buildInto runs `go args...` (OUT replaced by the output path) in a fresh
// folder beside bin holding files, checks that the result's --version says
// want (if want is set), and moves it to bin.
func buildInto(ctx context.Context, bin, name string, files map[string]string, args []string, want string) error {
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Dir(bin), name+".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	for f, content := range files {
		if err := os.WriteFile(filepath.Join(work, f), []byte(content), 0o644); err != nil {
			return err
		}
	}
	out := filepath.Join(work, "out")
	for i, a := range args {
		if a == "OUT" {
			args[i] = out
		}
	}
	return goBuild(ctx, work, args, out, bin, want)
}

// goBuild runs go with args in dir (module mode, no workspace), checks the
// binary out, and renames it to bin (atomically: a concurrent run sees the
// old file or the new one).
func goBuild(ctx context.Context, dir string, args []string, out, bin, want string) error {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, b)
	}
	if want != "" {
		if ok, _ := reports(ctx, out, want); !ok {
			b, _ := exec.CommandContext(ctx, out, "--version").CombinedOutput()
			return fmt.Errorf("the binary built in %s does not say %q:\n%s", dir, want, b)
		}
	}
	return os.Rename(out, bin)
}
