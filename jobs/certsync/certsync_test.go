package certsync_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/jobs/certsync"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/certtest"
)

// reloader is a reload command that appends, per run, the SHA-256 of the
// directory's certificate files as it finds them, and fails while the
// file fail exists.
type reloader struct {
	dir, log, fail string
}

func newReloader(t *testing.T, dir string) *reloader {
	base := t.TempDir()
	return &reloader{dir: dir, log: filepath.Join(base, "reloads"), fail: filepath.Join(base, "fail")}
}

func (r *reloader) argv() []string {
	return []string{"/bin/sh", "-c", `cat "$1"/*.pem | sha256sum | cut -d' ' -f1 >> "$2"; test ! -e "$3"`,
		"reload", r.dir, r.log, r.fail}
}

func (r *reloader) failing(t *testing.T, on bool) {
	t.Helper()
	var err error
	if on {
		err = os.WriteFile(r.fail, nil, 0o600)
	} else {
		err = os.Remove(r.fail)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// runs is the hash each run of the command saw.
func (r *reloader) runs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// filesHash is what a run of the command sees in the directory now.
func filesHash(t *testing.T, dir string) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.pem"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		h.Write(readFile(t, n))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func markerExists(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".certsync", "reload-pending"))
	return err == nil
}

func TestTheReloadCommandRunsOnceAfterEachBatchAndAFailedOneIsRetriedUntilItSucceeds(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	want := issue(t, r, "a.test", "b.test", "c.test")
	dir := filepath.Join(t.TempDir(), "certs")
	cmd := newReloader(t, dir)
	cmd.failing(t, true)
	s := startSyncer(t, r, func(o *certsync.Options) { o.Dir, o.Reload = dir, cmd.argv() })

	// The three certificates read at start are one batch: written, then
	// one run of the command, which fails.
	st := s.waitFor(t, "a failed reload", func(st certsync.Status) bool { return st.ReloadErr != nil })
	if fmtFiles(st.Files) != fmtFiles(want) || st.Err != nil {
		t.Errorf("before the reload: files %v, %v; want all of %v written", st.Files, st.Err, want)
	}
	if !st.ReloadPending || !strings.Contains(st.ReloadErr.Error(), "/bin/sh") || !markerExists(dir) {
		t.Errorf("a failed reload: pending %v, marker %v, error %v; want it owed, on disk, and the error naming the command",
			st.ReloadPending, markerExists(dir), st.ReloadErr)
	}
	// (It may have been retried meanwhile: the back-off is short.)
	if runs := cmd.runs(t); len(runs) < 1 || runs[0] != filesHash(t, dir) {
		t.Errorf("runs of the command %v, want the first after all three files were in place (%s)", runs, filesHash(t, dir))
	}
	if got := s.metric(t, "snip_certsync_reloads_total", "result", "failed"); got < 1 {
		t.Errorf("snip_certsync_reloads_total{result=failed} = %v, want it counted", got)
	}

	// Retried after a back-off, with no new change, until it succeeds.
	cmd.failing(t, false)
	s.waitFor(t, "the reload retried", func(st certsync.Status) bool { return !st.ReloadPending })
	runs := cmd.runs(t)
	failed, ok := s.metric(t, "snip_certsync_reloads_total", "result", "failed"), s.metric(t, "snip_certsync_reloads_total", "result", "ok")
	if ok != 1 || float64(len(runs)) != failed+ok || markerExists(dir) {
		t.Errorf("after the retry: %d runs, %v failed and %v ok, marker %v; want one success ending the retries, its record gone",
			len(runs), failed, ok, markerExists(dir))
	}
	for i, h := range runs {
		if h != filesHash(t, dir) {
			t.Errorf("run %d saw other files (%s) than the batch's (%s)", i, h, filesHash(t, dir))
		}
	}

	// A renewal is a batch of its own: its file, then one run.
	r.DueNow("a.test")
	r.Pass()
	want["a.test"] = r.Serial("a.test")
	st = s.waitFiles(t, want)
	if after := cmd.runs(t); st.ReloadPending || len(after) != len(runs)+1 || after[len(after)-1] != filesHash(t, dir) {
		t.Errorf("after a renewal: pending %v, runs %v; want one more run, which saw the renewed file", st.ReloadPending, after)
	}
	if got := s.metric(t, "snip_certsync_writes_total"); got != 4 {
		t.Errorf("snip_certsync_writes_total = %v, want 4 (three, then the renewal)", got)
	}
}

func TestAReloadOwedWhenTheJobStopsRunsAtItsNextStartThoughNoFileChanges(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	want := issue(t, r, "shop.test")
	dir := filepath.Join(t.TempDir(), "certs")
	cmd := newReloader(t, dir)
	cmd.failing(t, true)
	first := startSyncer(t, r, func(o *certsync.Options) { o.Dir, o.Reload = dir, cmd.argv() })
	first.waitFor(t, "a failed reload", func(st certsync.Status) bool { return st.ReloadErr != nil })
	first.stop()
	if !markerExists(dir) {
		t.Fatal("a job stopped with a reload owed left no record of it")
	}
	before := len(cmd.runs(t))

	cmd.failing(t, false)
	next := startSyncer(t, r, func(o *certsync.Options) { o.Dir, o.Reload = dir, cmd.argv() })
	st := next.waitFor(t, "the owed reload", func(st certsync.Status) bool { return !st.ReloadPending })
	if fmtFiles(st.Files) != fmtFiles(want) || next.metric(t, "snip_certsync_writes_total") != 0 {
		t.Errorf("the next start: files %v, %v written; want the same file, not rewritten", st.Files, next.metric(t, "snip_certsync_writes_total"))
	}
	if runs := cmd.runs(t); len(runs) != before+1 || markerExists(dir) {
		t.Errorf("runs %v, marker %v; want the owed run done and its record gone", runs, markerExists(dir))
	}
}

func TestAReloadCommandThatHangsIsKilledAtItsTimeout(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	issue(t, r, "shop.test")
	s := startSyncer(t, r, func(o *certsync.Options) {
		o.Dir, o.Reload, o.ReloadTimeout = filepath.Join(t.TempDir(), "certs"), []string{"/bin/sleep", "600"}, 100*time.Millisecond
	})
	st := s.waitFor(t, "a failed reload", func(st certsync.Status) bool { return st.ReloadErr != nil })
	if !strings.Contains(st.ReloadErr.Error(), "timed out after 100ms") || !st.ReloadPending {
		t.Errorf("a reload that hangs: %v (pending %v), want it timed out and still owed", st.ReloadErr, st.ReloadPending)
	}
}

func TestADirectoryThatCannotBeCreatedIsAnErrorNamingItAndNothingIsWrittenUntilItCan(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	want := issue(t, r, "shop.test", "blog.test")
	base := t.TempDir()
	dir := filepath.Join(base, "certs")
	if err := os.WriteFile(dir, []byte("a file where the directory should be\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSyncer(t, r, func(o *certsync.Options) { o.Dir = dir })
	st := s.waitFor(t, "an error", func(st certsync.Status) bool { return st.Err != nil })
	if !strings.Contains(st.Err.Error(), dir) || len(st.Files) != 0 {
		t.Errorf("a file where the directory should be: %v, files %v; want an error naming %s and no file", st.Err, st.Files, dir)
	}
	if got := entries(t, base); !slices.Equal(got, []string{"certs"}) || string(readFile(t, dir)) != "a file where the directory should be\n" {
		t.Errorf("%s holds %v; want only the untouched file", base, got)
	}
	if s.metric(t, "snip_certsync_errors_total", "op", "dir") < 1 || s.metric(t, "snip_certsync_in_sync") != 0 {
		t.Error("the error is not counted, or the job says it is in sync")
	}

	// Nothing is lost: once the path is free, a retry writes everything.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the retry", func(st certsync.Status) bool { return st.Err == nil && fmtFiles(st.Files) == fmtFiles(want) })
	if got := entries(t, filepath.Join(dir, ".certsync")); len(got) != 0 {
		t.Errorf("temporary files left: %v", got)
	}
}

func TestAFileThatCannotBeReplacedIsAnErrorNamingItAndLeavesNoTemporaryFile(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	want := issue(t, r, "shop.test", "blog.test")
	dir := filepath.Join(t.TempDir(), "certs")
	obstacle := filepath.Join(dir, "shop.test.pem")
	if err := os.MkdirAll(obstacle, 0o755); err != nil { // a directory cannot be renamed over
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(obstacle, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSyncer(t, r, func(o *certsync.Options) { o.Dir = dir })
	st := s.waitFor(t, "an error", func(st certsync.Status) bool { return st.Err != nil })
	if !strings.Contains(st.Err.Error(), obstacle) {
		t.Errorf("error %v, want it naming %s", st.Err, obstacle)
	}
	if fmtFiles(st.Files) != fmtFiles(map[string]string{"blog.test": want["blog.test"]}) {
		t.Errorf("files %v; want blog.test written all the same", st.Files)
	}
	if got := entries(t, filepath.Join(dir, ".certsync")); len(got) != 0 {
		t.Errorf("temporary files left: %v", got)
	}
	if fi, err := os.Stat(obstacle); err != nil || !fi.IsDir() {
		t.Errorf("the obstacle was touched: %v", err)
	}
	if s.metric(t, "snip_certsync_errors_total", "op", "write") < 1 {
		t.Error("the failed write is not counted")
	}

	if err := os.RemoveAll(obstacle); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the retry", func(st certsync.Status) bool { return st.Err == nil && fmtFiles(st.Files) == fmtFiles(want) })
}

func TestANameThatIsNotASafeFileNameIsLoggedAndSkipped(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	want := issue(t, r, "shop.test")
	// Rows the renewer would never store (it normalizes names), each a
	// valid pair: shop.test's, its key sealed for the other name.
	sealed := benchtest.Value[[]byte](t, r.Pool, `SELECT key_sealed FROM certrenew_certificates WHERE domain = 'shop.test' AND current`)
	key, err := r.Keys.Open(sealed, keyring.CertificateAAD("shop.test"))
	if err != nil {
		t.Fatal(err)
	}
	bad := []string{"../escape.test", "a/b.test", ".hidden.test", "Upper.test", "two..dots.test", "single"}
	for _, d := range bad {
		benchtest.Exec(t, r.Pool, `INSERT INTO certrenew_certificates (domain, chain_pem, key_sealed, key_id, serial, ari_cert_id,
				not_before, not_after, renew_at, ari_next_check, token, instance)
			SELECT $1, chain_pem, $2, key_id, serial, ari_cert_id, not_before, not_after, renew_at, ari_next_check, token, instance
			FROM certrenew_certificates WHERE domain = 'shop.test' AND current`, d, r.Keys.Seal(key, keyring.CertificateAAD(d)))
	}
	base := t.TempDir()
	dir := filepath.Join(base, "certs")
	s := startSyncer(t, r, func(o *certsync.Options) { o.Dir = dir })
	st := s.waitFiles(t, want)
	if st.Err != nil {
		t.Errorf("skipping names is not an error of the directory: %v", st.Err)
	}
	for _, d := range bad {
		if !s.logged("not a safe file name", `"domain":"`+d+`"`) {
			t.Errorf("%q: no log line naming it", d)
		}
	}
	if got := s.metric(t, "snip_certsync_skipped_names"); got != float64(len(bad)) {
		t.Errorf("snip_certsync_skipped_names = %v, want %d", got, len(bad))
	}
	if got := entries(t, base); !slices.Equal(got, []string{"certs"}) {
		t.Errorf("%s holds %v: something was written outside the directory", base, got)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{".certsync", "shop.test.pem"}) {
		t.Errorf("the directory holds %v, want only shop.test.pem (and the job's subdirectory)", got)
	}
}

func TestAJobThatCannotOpenTheKeysRemovesNoFileThatPostgreSQLStillHolds(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	want := issue(t, r, "shop.test", "blog.test")
	dir := filepath.Join(t.TempDir(), "certs")
	first := startSyncer(t, r, func(o *certsync.Options) { o.Dir = dir })
	first.waitFiles(t, want)
	first.stop()
	before := filesHash(t, dir)

	// Started with another key (a rotation gone wrong): it reads nothing it
	// can open, and says so, but removes nothing.
	otherKey := filepath.Join(t.TempDir(), "other.key")
	raw := make([]byte, keyring.KeySize)
	rand.Read(raw)
	if err := os.WriteFile(otherKey, []byte(base64.StdEncoding.EncodeToString(raw)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startSyncer(t, r, func(o *certsync.Options) { o.Dir, o.KeyFile = dir, otherKey })
	st := s.waitFor(t, "an error", func(st certsync.Status) bool { return st.Err != nil })
	if !strings.Contains(st.Err.Error(), "cannot open") || fmtFiles(st.Files) != fmtFiles(map[string]string{"shop.test": "", "blog.test": ""}) {
		t.Errorf("status %+v; want both files kept, unserved, as an error", st)
	}
	if filesHash(t, dir) != before || s.metric(t, "snip_certsync_in_sync") != 0 {
		t.Error("the files changed, or the job says it is in sync")
	}
	if !s.logged("file kept", `"domain":"blog.test"`) {
		t.Error("no log line names a kept file's domain")
	}

	// A file whose domain PostgreSQL no longer holds is removed all the same
	// (at the retry: this reader saw no change).
	benchtest.Exec(t, r.Pool, `UPDATE certrenew_certificates SET current = false WHERE domain = 'blog.test' AND current`)
	s.waitFor(t, "blog.test removed", func(st certsync.Status) bool {
		return fmtFiles(st.Files) == fmtFiles(map[string]string{"shop.test": ""})
	})
	if got := entries(t, dir); !slices.Equal(got, []string{".certsync", "shop.test.pem"}) {
		t.Errorf("the directory holds %v", got)
	}
}
