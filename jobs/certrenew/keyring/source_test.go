package keyring

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The web tier loads the sealing keys with Load: a key_file that is a named
// pipe is refused at once (it would block the reader until a writer came)
// rather than waited on.
func TestAKeyFileThatIsANamedPipeIsRefusedWithoutWaiting(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "keys")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Source{File: fifo}.Load()
	if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), "key_file "+fifo) {
		t.Fatalf("Load of a named pipe: %v", err)
	}
}
