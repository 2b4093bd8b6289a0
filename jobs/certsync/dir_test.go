package certsync_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/snip/snip-jobs/jobs/certsync"
	"github.com/snip/snip-jobs/testbench/certtest"
)

// firstSync waits for the job's first sync and returns its status.
func (s *syncer) firstSync(t *testing.T) certsync.Status {
	t.Helper()
	return s.waitFor(t, "a sync", func(certsync.Status) bool { return true })
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	chmod(t, dir, mode) // whatever the umask
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestALinkPlantedAsTheWorkFolderOrAsTheDirectoryIsNotFollowed(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	want := issue(t, r, "shop.test")

	// Someone who could write in the directory made its .certsync a link to
	// a folder of their choosing, holding a file named as a temporary file.
	dir := filepath.Join(t.TempDir(), "certs")
	mkdir(t, dir, 0o750)
	elsewhere := t.TempDir()
	planted := filepath.Join(elsewhere, "tmp-x")
	if err := os.WriteFile(planted, []byte("not certsync's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, ".certsync")
	if err := os.Symlink(elsewhere, link); err != nil {
		t.Fatal(err)
	}
	cmd := newReloader(t, dir) // so that a reload would be recorded in the work folder
	s := startSyncer(t, r, func(o *certsync.Options) { o.Dir, o.Reload = dir, cmd.argv() })
	st := s.firstSync(t)
	if st.Err == nil || !strings.Contains(st.Err.Error(), link+" is a symbolic link") || !strings.Contains(st.Err.Error(), "rm "+link) {
		t.Errorf("a planted .certsync link: %v; want an error naming %s as a link, and the fix", st.Err, link)
	}
	if got := entries(t, elsewhere); !slices.Equal(got, []string{"tmp-x"}) || string(readFile(t, planted)) != "not certsync's\n" {
		t.Errorf("where the link points: %v; want tmp-x untouched and nothing else", got)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{".certsync"}) || len(st.Files) != 0 {
		t.Errorf("the directory holds %v (files %v); want nothing written", got, st.Files)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced or removed: %v", err)
	}
	if runs := cmd.runs(t); len(runs) != 0 {
		t.Errorf("the reload command ran %d times; want none while the directory is refused", len(runs))
	}

	// Once the link is gone, the job makes its folder and writes.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the retry", func(st certsync.Status) bool { return st.Err == nil && fmtFiles(st.Files) == fmtFiles(want) })
	if fi, err := os.Lstat(link); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("the job's folder: %v, %v; want a directory, mode 0700", fi, err)
	}
	if got := entries(t, elsewhere); !slices.Equal(got, []string{"tmp-x"}) {
		t.Errorf("where the link pointed: %v; want tmp-x alone", got)
	}
	s.stop()

	// The directory itself a link: refused, its target untouched.
	target := t.TempDir()
	linked := filepath.Join(t.TempDir(), "certs")
	if err := os.Symlink(target, linked); err != nil {
		t.Fatal(err)
	}
	s = startSyncer(t, r, func(o *certsync.Options) { o.Dir = linked })
	st = s.firstSync(t)
	if st.Err == nil || !strings.Contains(st.Err.Error(), "the directory "+linked+" is a symbolic link") {
		t.Errorf("dir a link: %v; want an error naming %s as a link", st.Err, linked)
	}
	if got := entries(t, target); len(got) != 0 {
		t.Errorf("the link's target holds %v; want nothing written", got)
	}
}

func TestADirectoryOthersCanWriteInIsRefusedWithTheFixAndUsedOnceItIsPrivate(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	want := issue(t, r, "shop.test", "blog.test")
	dir := filepath.Join(t.TempDir(), "certs")
	mkdir(t, dir, 0o777)
	s := startSyncer(t, r, func(o *certsync.Options) { o.Dir = dir })
	st := s.firstSync(t)
	for _, part := range []string{"the directory " + dir + " is writable by its group and others (mode 0777)", "chmod go-w " + dir} {
		if st.Err == nil || !strings.Contains(st.Err.Error(), part) {
			t.Errorf("a directory of mode 0777: %v; want an error saying %q", st.Err, part)
		}
	}
	if got := entries(t, dir); len(got) != 0 || len(st.Files) != 0 {
		t.Errorf("the directory holds %v (files %v); want nothing written", got, st.Files)
	}
	if s.metric(t, "snip_certsync_errors_total", "op", "dir") < 1 || s.metric(t, "snip_certsync_in_sync") != 0 {
		t.Error("the refusal is not counted, or the job says it is in sync")
	}
	if !s.logged("the directory cannot be used", "mode 0777") {
		t.Error("the refusal is not logged")
	}

	// The work folder is held to the same rule.
	chmod(t, dir, 0o750)
	work := filepath.Join(dir, ".certsync")
	mkdir(t, work, 0o770)
	st = s.waitFor(t, "the work folder refused", func(st certsync.Status) bool {
		return st.Err != nil && strings.Contains(st.Err.Error(), "the directory "+work+" is writable by its group (mode 0770)")
	})
	if got := entries(t, dir); !slices.Equal(got, []string{".certsync"}) {
		t.Errorf("the directory holds %v; want nothing written", got)
	}

	if os.Geteuid() == 0 { // only root can give the directory away
		chmod(t, work, 0o700)
		if err := os.Chown(dir, 65534, -1); err != nil {
			t.Fatal(err)
		}
		s.waitFor(t, "a directory of another user refused", func(st certsync.Status) bool {
			return st.Err != nil && strings.Contains(st.Err.Error(), "the directory "+dir+" is owned by uid 65534, not by the service's user (uid 0)")
		})
		if err := os.Chown(dir, 0, -1); err != nil {
			t.Fatal(err)
		}
	}

	chmod(t, work, 0o700)
	s.waitFor(t, "the retry", func(st certsync.Status) bool { return st.Err == nil && fmtFiles(st.Files) == fmtFiles(want) })
}

func TestAPrivateDirectoryUnderAStickyWorldWritableParentIsUsed(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	want := issue(t, r, "shop.test")
	parent := t.TempDir()
	chmod(t, parent, 0o777|os.ModeSticky) // as /tmp
	dir := filepath.Join(parent, "certs")
	s := startSyncer(t, r, func(o *certsync.Options) { o.Dir = dir })
	if st := s.waitFiles(t, want); st.Err != nil {
		t.Errorf("a private directory under a sticky parent: %v", st.Err)
	}
	for path, mode := range map[string]os.FileMode{dir: 0o750, filepath.Join(dir, ".certsync"): 0o700} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() || fi.Mode().Perm() != mode || int(fi.Sys().(*syscall.Stat_t).Uid) != os.Geteuid() {
			t.Errorf("%s: %v, owner %d; want a directory of mode %v owned by this user", path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, mode)
		}
	}
}
