package benchtest

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// Logger returns a slog.Logger that writes through t.Log while the test runs and
// drops lines afterwards (background goroutines may outlive the test by a moment,
// and t.Log after the end panics). Set SNIP_TEST_LOG=debug to see debug lines.
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	level := slog.LevelInfo
	if strings.EqualFold(os.Getenv("SNIP_TEST_LOG"), "debug") {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
