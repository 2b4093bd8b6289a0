package secretfile

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
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if b, err := Read(write("ok", "s3cret\n", 0o600), 64, Safe); err != nil || string(b) != "s3cret\n" {
		t.Fatalf("a private regular file: %q, %v", b, err)
	}
	if _, err := Read(write("big", strings.Repeat("x", 65), 0o600), 64, Safe); !errors.Is(err, ErrTooLarge) {
		t.Errorf("65 bytes with a limit of 64: %v, want ErrTooLarge", err)
	}
	if _, err := Read(write("shared", "s", 0o622), 64, Safe); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Errorf("a file others may write: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(fifo, 64, Safe); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a named pipe: %v", err)
	}
	// /proc files say they hold 0 bytes: the limit, not the size, bounds the read.
	if _, err := Read("/proc/self/status", 16, func(os.FileInfo) error { return nil }); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a file whose size lies: %v, want ErrTooLarge", err)
	}
}
