// Package relbuild builds the snip-jobs binary as it is released: from a git
// commit, with -trimpath, stripped (-s -w), without cgo, for the host's
// architecture, and stamped through -ldflags -X with the version, the commit
// and the commit's date, all read from git.
//
// What is guaranteed: two builds of one commit with one Go toolchain and one
// module graph (go.sum) are the same bytes, wherever the tree is checked out
// and whatever the caller's environment says. Nothing in the build reads the
// clock (the date is the commit's), the checkout's path (-trimpath), the
// user's GOFLAGS, GOEXPERIMENT or architecture level (set here), or a C
// toolchain (CGO_ENABLED=0). The stamp comes from git rather than from the
// Go toolchain's own VCS stamping (debug.ReadBuildInfo's vcs.* settings),
// which records nothing in a git worktree (it looks for a .git directory) and
// would make the bytes depend on how the tree was checked out.
//
// What is NOT: the same bytes across Go releases (the toolchain's version is
// recorded and its code generator changes), or for another architecture than
// the host's (not offered: the package's man page is read from the binary's
// own help, so the binary must run here). Without cgo, user and group names
// resolve from /etc/passwd and /etc/group only (no NSS modules such as LDAP).
//
// A build tool: the snip-jobs binary must not import it.
package relbuild

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/mod/module"
)

// Pkg is the main package a release builds.
const Pkg = "./cmd/snip-jobs"

// Stamp is what a release binary is stamped with.
type Stamp struct {
	// Version is the commit's release tag (v1.2.3) or a Go pseudo-version
	// naming it (v0.0.0-20261207143250-93ef996abcde), ending in "+dirty"
	// when the tree had uncommitted changes.
	Version string
	Commit  string    // the full hash
	Date    time.Time // the commit's committer date, UTC
}

// Modified reports whether the stamp is of a tree with uncommitted changes.
func (s Stamp) Modified() bool { return strings.HasSuffix(s.Version, "+dirty") }

// Options says what to build.
type Options struct {
	Dir string // the module's root, in a git checkout
	Out string // the binary's path
	// AllowModified builds a tree with changes not committed (untracked
	// files count), stamped "+dirty": for tests. A release refuses it.
	AllowModified bool
}

// Build builds the binary and returns its stamp.
func Build(ctx context.Context, o Options) (Stamp, error) {
	s, err := ReadStamp(ctx, o.Dir)
	if err != nil {
		return Stamp{}, err
	}
	if s.Modified() && !o.AllowModified {
		return Stamp{}, fmt.Errorf("%s has changes not committed (git status): a release is built from a commit", o.Dir)
	}
	args := append(buildFlags(), "-ldflags="+ldflags(s), "-o", o.Out, Pkg)
	if err := goCmd(ctx, o.Dir, args...); err != nil {
		return Stamp{}, err
	}
	if err := checkBuilt(o.Out); err != nil {
		return Stamp{}, err
	}
	return s, nil
}

// Warm compiles what Build compiles, into Go's build cache, and links
// nothing: the test bench's preparation, so that a test's Build only links.
func Warm(ctx context.Context, dir string) error {
	// Two packages: go build then compiles both and writes no binary.
	return goCmd(ctx, dir, append(buildFlags(), Pkg, "./configs")...)
}

func buildFlags() []string { return []string{"build", "-trimpath", "-buildvcs=false"} }

// ldflags strips the symbol table and DWARF, and stamps cmd/snip-jobs's
// link-time variables.
func ldflags(s Stamp) string {
	return fmt.Sprintf("-s -w -X main.stampVersion=%s -X main.stampCommit=%s -X main.stampDate=%s",
		s.Version, s.Commit, s.Date.Format(time.RFC3339))
}

// archLevels is the instruction-set level built for each architecture
// offered: the baseline, whatever the caller's environment says.
var archLevels = map[string]string{"amd64": "GOAMD64=v1", "arm64": "GOARM64=v8.0"}

// Env is the go command's environment for a release build: the caller's,
// but for every variable that changes what is built.
func Env() ([]string, error) {
	level, ok := archLevels[runtime.GOARCH]
	if runtime.GOOS != "linux" || !ok {
		return nil, fmt.Errorf("releases are built on linux/amd64 or linux/arm64 for that host, not on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	set := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH, level,
		"GOFLAGS=", "GOEXPERIMENT=", "GOFIPS140=off", "GOWORK=off"}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !overridden(k, set) {
			env = append(env, kv)
		}
	}
	return append(env, set...), nil
}

func overridden(key string, set []string) bool {
	if strings.HasPrefix(key, "CGO_") || strings.HasPrefix(key, "GOAMD64") || strings.HasPrefix(key, "GOARM") {
		return true
	}
	for _, kv := range set {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

func goCmd(ctx context.Context, dir string, args ...string) error {
	env, err := Env()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, out)
	}
	return nil
}

// checkBuilt reads the binary's build information back: what the release
// promises, recorded by the toolchain itself.
func checkBuilt(path string) error {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("the built binary %s: %w", path, err)
	}
	want := map[string]string{"-trimpath": "true", "CGO_ENABLED": "0"}
	got := map[string]string{}
	for _, s := range bi.Settings {
		got[s.Key] = s.Value
	}
	var errs []error
	for k, v := range want {
		if got[k] != v {
			errs = append(errs, fmt.Errorf("%s=%q, want %q", k, got[k], v))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("the built binary %s is not a release build: %w", path, errors.Join(errs...))
	}
	return nil
}

// ReadStamp reads the stamp of the tree in dir from git: HEAD's (see
// CommitStamp), "+dirty" when the tree differs from HEAD.
func ReadStamp(ctx context.Context, dir string) (Stamp, error) {
	s, err := CommitStamp(ctx, dir, "HEAD")
	if err != nil {
		return Stamp{}, fmt.Errorf("a release is built from a git checkout: %w", err)
	}
	status, err := git(ctx, dir, "status", "--porcelain")
	if err != nil {
		return Stamp{}, err
	}
	if status != "" {
		s.Version += "+dirty"
	}
	return s, nil
}

// CommitStamp is the stamp of commit rev of the repository in dir: its hash
// and committer date, and its tag (v*) if it has one, else a pseudo-version
// after the newest tag it descends from (v0.0.0-… without one).
func CommitStamp(ctx context.Context, dir, rev string) (Stamp, error) {
	head, err := git(ctx, dir, "show", "-s", "--format=%H %cI", rev)
	if err != nil {
		return Stamp{}, err
	}
	hash, date, _ := strings.Cut(head, " ")
	t, err := time.Parse(time.RFC3339, date)
	if err != nil {
		return Stamp{}, fmt.Errorf("the commit's date %q: %w", date, err)
	}
	s := Stamp{Commit: hash, Date: t.UTC()}
	if tag, err := git(ctx, dir, "describe", "--tags", "--exact-match", "--match=v[0-9]*", rev); err == nil {
		s.Version = tag
	} else {
		older, _ := git(ctx, dir, "describe", "--tags", "--abbrev=0", "--match=v[0-9]*", rev) // "" without a tag
		s.Version = module.PseudoVersion("", older, s.Date, hash[:12])
	}
	return s, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// Author is the commit's author, "Name <address>": the package's maintainer
// unless the release command is told otherwise.
func Author(ctx context.Context, dir string) (string, error) {
	return git(ctx, dir, "show", "-s", "--format=%an <%ae>", "HEAD")
}

// ModuleRoot is the folder of the go.mod above dir (or dir's own).
func ModuleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod in %s or above: run the release command in the snip-jobs module", dir)
		}
	}
}
