package systemdtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/snip/snip-jobs/testbench/flock"
)

// The root file system: Debian's minimal base with systemd as init, dbus
// (systemctl's peer for some requests) and procps.
const (
	Suite  = "bookworm"
	Mirror = "http://deb.debian.org/debian"
)

// Packages are installed on top of debootstrap's minbase variant.
var Packages = []string{"systemd", "systemd-sysv", "dbus", "procps"}

// Rootfs returns a Debian root file system under cacheDir, building it with
// debootstrap when no earlier run did (about a minute and 245 MB). Its folder
// name carries a hash of what is installed, so a change of Packages builds a
// new one. The build runs in a folder of its own, renamed into place only
// once debootstrap succeeded: an interrupted build is never reused (its
// folder is removed by the next build). Concurrent callers, in this process
// or others, wait for one build (a lock file beside it). Containers never
// write to it (Boot overlays it with a tmpfs).
//
// debootstrap runs in a mount namespace of its own, so the /proc and /sys it
// mounts in the new tree vanish with it even when it is killed.
func Rootfs(ctx context.Context, cacheDir string) (string, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("nspawn: cache folder: %w", err)
	}
	name := "nspawn-" + Suite + "-" + recipeHash()
	final := filepath.Join(cacheDir, name)
	unlock, err := flock.Lock(ctx, final+".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if fi, err := os.Stat(final); err == nil && fi.IsDir() {
		return final, nil
	}
	for _, tmp := range stale(cacheDir, name) {
		if err := os.RemoveAll(tmp); err != nil {
			return "", fmt.Errorf("nspawn: remove the interrupted build %s: %w", tmp, err)
		}
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return "", fmt.Errorf("nspawn: debootstrap builds the container's root file system: %w (Debian package debootstrap; .ci/run installs it)", err)
	}
	tmp, err := os.MkdirTemp(cacheDir, "."+name+".build-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // the container's /, which every user traverses
		return "", err
	}
	args := append([]string{"--mount", "--propagation", "private", "--",
		"debootstrap", "--variant=minbase", "--include=" + strings.Join(Packages, ",")}, Suite, tmp, Mirror)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("nspawn: debootstrap %s into %s: %w\n%s", Suite, tmp, err, tail(out, 40))
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	return final, nil
}

// recipeHash names what Rootfs installs.
func recipeHash() string {
	h := sha256.Sum256([]byte(Suite + " " + Mirror + " minbase " + strings.Join(Packages, ",")))
	return hex.EncodeToString(h[:4])
}

// stale lists the build folders of name left by interrupted builds.
func stale(dir, name string) []string {
	matches, _ := filepath.Glob(filepath.Join(dir, "."+name+".build-*"))
	return matches
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
