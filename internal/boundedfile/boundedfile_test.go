package boundedfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A secret file is read only if it is a regular file no one else may write,
// and no further than the limit: a named pipe is refused without waiting for
// a writer (the test would hang otherwise), a file whose size lies is read
// no further than the limit.
func TestASecretFileIsReadOnlyIfRegularPrivateAndSmall(t *testing.T) {
	dir := t.TempDir()
	if b, err := Read(write(t, dir, "ok", "s3cret\n", 0o600), 64, Safe); err != nil || string(b) != "s3cret\n" {
		t.Fatalf("a private regular file: %q, %v", b, err)
	}
	if _, err := Read(write(t, dir, "big", strings.Repeat("x", 65), 0o600), 64, Safe); !errors.Is(err, ErrTooLarge) {
		t.Errorf("65 bytes with a limit of 64: %v, want ErrTooLarge", err)
	}
	if _, err := Read(write(t, dir, "shared", "s", 0o622), 64, Safe); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Errorf("a file others may write: %v", err)
	}
	if _, err := Read(fifo(t, dir), 64, Safe); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a named pipe: %v", err)
	}
	// /proc files say they hold 0 bytes: the limit, not the size, bounds the read.
	if _, err := Read("/proc/self/status", 16, func(os.FileInfo) error { return nil }); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a file whose size lies: %v, want ErrTooLarge", err)
	}
}

// A file anyone may read (a CA bundle) is read whatever its mode, but only
// if it is a regular file and no further than the limit: /dev/zero and a
// named pipe are refused unopened.
func TestAFileAnyoneMayReadIsReadOnlyIfRegularAndSmall(t *testing.T) {
	dir := t.TempDir()
	if b, err := Read(write(t, dir, "ca.pem", "PEM\n", 0o666), 64, Regular); err != nil || string(b) != "PEM\n" {
		t.Fatalf("a regular file others may write: %q, %v; want it read (Regular judges the type only)", b, err)
	}
	for _, path := range []string{"/dev/zero", fifo(t, dir), dir} {
		if _, err := Read(path, 64, Regular); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v, want it refused as not a regular file", path, err)
		}
	}
	if _, err := Read(write(t, dir, "big.pem", strings.Repeat("x", 65), 0o644), 64, Regular); !errors.Is(err, ErrTooLarge) {
		t.Errorf("65 bytes with a limit of 64: %v, want ErrTooLarge", err)
	}
}

func write(t *testing.T, dir, name, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func fifo(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "fifo")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
