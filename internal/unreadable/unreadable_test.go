package unreadable_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/internal/unreadable"
)

// The helper process: restricts its thread to hide the paths in
// UNREADABLE_HIDE, then has a shell it starts from that thread try to read
// each of its arguments, one line each: "PATH read" or "PATH refused".
func TestMain(m *testing.M) {
	if hide := os.Getenv("UNREADABLE_HIDE"); hide != "" {
		runtime.LockOSThread()
		if err := unreadable.Restrict(strings.Split(hide, ":")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		create := os.Getenv("UNREADABLE_CREATE") // files made after the restriction
		for _, p := range strings.Split(create, ":") {
			if err := os.WriteFile(p, []byte("new"), 0o600); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
		}
		sh := exec.Command("/bin/sh", append([]string{"-c",
			`for f; do if cat "$f" >/dev/null 2>&1; then echo "$f read"; else echo "$f refused"; fi; done`, "sh"}, os.Args[1:]...)...)
		sh.Stdout, sh.Stderr = os.Stdout, os.Stderr
		if err := sh.Run(); err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func write(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A process started from a restricted thread cannot read a hidden file, a
// file beneath a hidden directory, or a hidden file through a link to it;
// it reads everything else, the hidden file's neighbours included, and
// files created later beside them. A file created later in a directory on
// the way to a hidden path is unreadable (the documented limit).
func TestAHiddenFileIsUnreadableToTheProcessesStartedAfterAndNothingElseIs(t *testing.T) {
	if err := unreadable.Available(); err != nil {
		t.Fatalf("this kernel must have Landlock for exec jobs to hide the service's secrets: %v", err)
	}
	d := t.TempDir()
	secret := write(t, filepath.Join(d, "etc", "url"))
	neighbour := write(t, filepath.Join(d, "etc", "snip-jobs.yaml"))
	keys := write(t, filepath.Join(d, "credentials", "svc", "keys"))
	other := write(t, filepath.Join(d, "credentials", "other", "file"))
	elsewhere := write(t, filepath.Join(d, "data", "report.csv"))
	link := filepath.Join(d, "data", "url-link")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	laterGranted := filepath.Join(d, "data", "later")
	laterOnTheWay := filepath.Join(d, "etc", "later")

	cmd := exec.Command(os.Args[0], secret, keys, link, neighbour, other, elsewhere, "/etc/hostname", laterGranted, laterOnTheWay)
	cmd.Env = append(os.Environ(),
		"UNREADABLE_HIDE="+secret+":"+filepath.Join(d, "credentials", "svc")+":/nonexistent/path",
		"UNREADABLE_CREATE="+laterGranted+":"+laterOnTheWay)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the helper: %v\n%s", err, out)
	}
	want := map[string]string{secret: "refused", keys: "refused", link: "refused", laterOnTheWay: "refused",
		neighbour: "read", other: "read", elsewhere: "read", "/etc/hostname": "read", laterGranted: "read"}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		p, verdict, _ := strings.Cut(line, " ")
		got[p] = verdict
	}
	for p, v := range want {
		if got[p] != v {
			t.Errorf("%s: %q, want %q", p, got[p], v)
		}
	}
	// This test process's own threads were never restricted.
	if _, err := os.ReadFile(secret); err != nil {
		t.Errorf("the restriction leaked to another process: %v", err)
	}
}

// Paths that cannot be hidden are refused, not silently skipped.
func TestRestrictRefusesARelativePathAndTheRoot(t *testing.T) {
	runtime.LockOSThread() // never unlocked: a refused call must not restrict, but if it did, the thread dies with the test
	for _, paths := range [][]string{{"etc/url"}, {"/"}} {
		if err := unreadable.Restrict(paths); err == nil {
			t.Errorf("Restrict(%q) = nil, want an error", paths)
		}
	}
}
