package service

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// stuckChild makes the test binary, run by the test below, a process whose
// start-up is stuck for good in a step that does not heed its context: it
// opens a named pipe no one writes to (what a CA file that was a pipe did
// to run), after watchSignals was started as run starts it.
const stuckChild = "SNIP_SERVICE_TEST_STUCK_START"

// A start-up stuck in a step that does not heed its context cannot keep
// the process deaf to SIGTERM: once shutdown_timeout has passed since the
// first signal and start-up has still not returned, the process exits
// (status 1), saying why. One signal is enough; the process used to wait for
// a second.
func TestAStartUpThatDoesNotStopAfterASignalEndsWithinShutdownTimeout(t *testing.T) {
	if fifo := os.Getenv(stuckChild); fifo != "" {
		stuckStartUp(fifo)
		return
	}
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience) // how long a broken build takes to fail
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), stuckChild+"="+fifo)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "stuck\n" {
		t.Fatalf("the child: %q, %v\n%s", line, err, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the process was still running %v after one SIGTERM", benchtest.Patience)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "start-up has not stopped within shutdown_timeout of the signal") {
		t.Errorf("after one SIGTERM: %v; want exit status 1 saying why, stderr:\n%s", err, stderr.String())
	}
}

// stuckStartUp is the child of the test above.
func stuckStartUp(fifo string) {
	r := &runner{cfg: &configs.File{ShutdownTimeout: 100 * time.Millisecond}, ilog: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	r.starting.Store(true)
	go r.watchSignals(sigs, os.Exit)
	os.Stdout.WriteString("stuck\n")
	f, err := os.Open(fifo) // blocks: no writer will come
	if err == nil {
		f.Close()
	}
	os.Exit(3)
}
