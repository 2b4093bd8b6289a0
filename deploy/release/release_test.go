package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"

	"github.com/snip/snip-jobs/deploy/release/debpkg"
	"github.com/snip/snip-jobs/deploy/release/relbuild"
)

// maxBinary is issue 40's bound on the release binary.
const maxBinary = 60 << 20

// A release of HEAD made twice, from two clones at different paths, is the
// same bytes, binary and package. The binary is a release build (-trimpath,
// no cgo, stripped) of at most 60 MB whose `version` says HEAD's stamp: the
// version derived from the commit, its hash, and its date, not the clock's.
// The package holds the files docs/install.md lists, and lintian finds in it
// exactly the tags docs/install.md lists with their reasons.
func TestAReleaseIsReproducibleStampedAndLintedAsDocumented(t *testing.T) {
	t.Parallel()
	lintian, err := exec.LookPath("lintian")
	if err != nil {
		t.Fatalf("lintian checks the package (Debian package lintian; .ci/run installs it): %v", err)
	}
	root := moduleRoot(t)
	head := gitOut(t, root, "rev-parse", "HEAD")
	a := release(t, clone(t, root, head, "a"))
	b := release(t, clone(t, root, head, "checkout-at-a-longer-path"))

	t.Run("reproducible", func(t *testing.T) {
		for _, pair := range [][2]string{{a.bin, b.bin}, {a.deb, b.deb}} {
			if !bytes.Equal(read(t, pair[0]), read(t, pair[1])) {
				t.Errorf("%s and %s differ: one commit built twice gave two results", pair[0], pair[1])
			}
		}
		if filepath.Base(a.deb) != filepath.Base(b.deb) {
			t.Errorf("package names differ: %s, %s", a.deb, b.deb)
		}
	})
	t.Run("stamp", func(t *testing.T) { checkStamp(t, root, head, a) })
	t.Run("size", func(t *testing.T) {
		fi, err := os.Stat(a.bin)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the release binary: %.1f MB; the package: %.1f MB", float64(fi.Size())/1e6, float64(size(t, a.deb))/1e6)
		if fi.Size() > maxBinary {
			t.Errorf("the release binary is %d bytes, more than 60 MB", fi.Size())
		}
	})
	// The package and the docs it must match, of one commit.
	t.Run("contents", func(t *testing.T) { checkContents(t, a.dir, a.deb) })
	t.Run("lintian", func(t *testing.T) { checkLintian(t, lintian, a.dir, a.deb) })
}

// A tree with a change not committed (an untracked file counts) is stamped
// "+dirty" and refused by the release build before it compiles anything.
func TestAModifiedTreeIsNoRelease(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	dir := clone(t, root, gitOut(t, root, "rev-parse", "HEAD"), "dirty")
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not committed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := relbuild.ReadStamp(context.Background(), dir)
	if err != nil || !s.Modified() || !strings.HasSuffix(s.Version, "+dirty") {
		t.Fatalf("the stamp of a modified tree: %+v, %v; want +dirty", s, err)
	}
	out := filepath.Join(t.TempDir(), "snip-jobs")
	_, err = relbuild.Build(context.Background(), relbuild.Options{Dir: dir, Out: out})
	if err == nil || !strings.Contains(err.Error(), "changes not committed") {
		t.Fatalf("a release of a modified tree: %v; want it refused", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused build left a binary: %v", err)
	}
}

type built struct {
	stamp         relbuild.Stamp
	dir, bin, deb string // the tree built, the binary, the package
}

// release makes a release of dir as the command does.
func release(t *testing.T, dir string) built {
	t.Helper()
	ctx := context.Background()
	out := t.TempDir()
	began := time.Now()
	b := built{dir: dir, bin: filepath.Join(out, "snip-jobs")}
	var err error
	if b.stamp, err = relbuild.Build(ctx, relbuild.Options{Dir: dir, Out: b.bin}); err != nil {
		t.Fatal(err)
	}
	if err := checkVersion(ctx, b.bin, b.stamp); err != nil {
		t.Fatal(err)
	}
	linked := time.Since(began)
	author, err := relbuild.Author(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	b.deb, err = debpkg.Package(ctx, debpkg.Spec{Source: dir, Binary: b.bin, Version: b.stamp.Version,
		Commit: b.stamp.Commit, Date: b.stamp.Date, Maintainer: author, OutDir: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("release of %s: binary in %v, package in %v", dir, linked.Round(100*time.Millisecond), (time.Since(began) - linked).Round(100*time.Millisecond))
	return b
}

// checkStamp: the binary is a release build stamped with the commit's
// version, hash and date.
func checkStamp(t *testing.T, root, head string, b built) {
	t.Helper()
	date, err := time.Parse(time.RFC3339, gitOut(t, root, "show", "-s", "--format=%cI", head))
	if err != nil {
		t.Fatal(err)
	}
	v := b.stamp.Version
	if tag, err := git(root, "describe", "--tags", "--exact-match", "--match=v[0-9]*", head); err == nil {
		if v != tag {
			t.Errorf("a tagged commit's version: %s, want its tag %s", v, tag)
		}
	} else if rev, _ := module.PseudoVersionRev(v); rev != head[:12] {
		t.Errorf("version %s does not name the commit %s", v, head)
	} else if vt, _ := module.PseudoVersionTime(v); !vt.Equal(date) {
		t.Errorf("version %s is not dated by the commit (%v)", v, date)
	}
	out, err := exec.Command(b.bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(out), "\n")
	for _, want := range []string{
		"snip-jobs " + v,
		"commit       " + head,
		"date         " + date.UTC().Format(time.RFC3339) + " (the commit's)",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("version does not say %q:\n%s", want, out)
		}
	}
	bi, err := buildinfo.ReadFile(b.bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" || bytes.Contains(read(t, b.bin), []byte(b.dir)) {
		t.Errorf("not a release build: %v (or it names the folder it was built in, %s)", settings, b.dir)
	}
	if nm, err := exec.Command("go", "tool", "nm", b.bin).CombinedOutput(); err == nil || !strings.Contains(string(nm), "no symbols") {
		t.Errorf("the binary has a symbol table (not stripped): go tool nm: %v, %.200s", err, nm)
	}
}

// packageFiles are the files the package installs, as docs/install.md
// lists them.
var packageFiles = regexp.MustCompile("(?m)^\\| `(/[^`]+)` \\|")

// checkContents: the package's files are docs/install.md's list, the example
// config is its one conffile, and it has the maintainer scripts of
// deploy/debian.
func checkContents(t *testing.T, root, deb string) {
	out, err := exec.Command("dpkg-deb", "--contents", deb).Output()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if name := strings.TrimPrefix(f[len(f)-1], "."); !strings.HasPrefix(f[0], "d") {
			got = append(got, name)
		}
	}
	var want []string
	for _, m := range packageFiles.FindAllStringSubmatch(installDoc(t, root, "### What the package installs"), -1) {
		want = append(want, m[1])
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the package's files:\n%s\ndocs/install.md lists:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	control := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "--control", deb, control).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --control: %v\n%s", err, out)
	}
	if c := string(read(t, filepath.Join(control, "conffiles"))); c != "/etc/snip-jobs/snip-jobs.yaml.example\n" {
		t.Errorf("conffiles: %q, want the example config alone", c)
	}
	for _, script := range []string{"postinst", "prerm", "postrm"} {
		if !bytes.Equal(read(t, filepath.Join(control, script)), read(t, filepath.Join(root, "deploy/debian", script))) {
			t.Errorf("the package's %s is not deploy/debian/%s", script, script)
		}
	}
}

// lintianTags are the tags docs/install.md's lintian table lists.
var lintianTags = regexp.MustCompile("(?m)^\\| `([a-z0-9.+-]+)` \\| [EWIPX] \\|")

// checkLintian: lintian (every level, pedantic and experimental included)
// finds exactly the tags docs/install.md lists.
func checkLintian(t *testing.T, lintian, root, deb string) {
	cmd := exec.Command(lintian, "--display-info", "--pedantic", "--display-experimental", "--tag-display-limit", "0", deb)
	out, err := cmd.Output()
	if err != nil && cmd.ProcessState.ExitCode() != 2 { // 2: tags of level error found; 1: lintian failed
		t.Fatalf("lintian: %v\n%s", err, out)
	}
	got := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == debpkg.Name+":" {
			got[f[2]] = true
		}
	}
	want := map[string]bool{}
	for _, m := range lintianTags.FindAllStringSubmatch(installDoc(t, root, "## Lintian"), -1) {
		want[m[1]] = true
	}
	for tag := range got {
		if !want[tag] {
			t.Errorf("lintian tag %s is not in docs/install.md's table", tag)
		}
	}
	for tag := range want {
		if !got[tag] {
			t.Errorf("docs/install.md lists lintian tag %s, which lintian no longer finds", tag)
		}
	}
	if t.Failed() {
		t.Logf("lintian:\n%s", out)
	}
}

// installDoc is the section of docs/install.md under heading, up to the
// next heading.
func installDoc(t *testing.T, root, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(string(read(t, filepath.Join(root, "docs/install.md"))), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/install.md has no section %q", heading)
	}
	if i := strings.Index(rest, "\n#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// clone checks commit out into a fresh clone of the repository at root.
func clone(t *testing.T, root, commit, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	gitOut(t, root, "clone", "--quiet", "--no-checkout", root, dir)
	gitOut(t, dir, "checkout", "--quiet", "--detach", commit)
	return dir
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := relbuild.ModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func git(dir string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := git(dir, args...)
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return out
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
