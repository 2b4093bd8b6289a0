package childproc_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/childproc"
)

// The bound of the tests' waits for a child to act on a signal: generous, it
// only decides how long a broken build takes to fail.
const patience = 30 * time.Second

func TestEnvLeavesOutSnipJobsAndSystemdVariables(t *testing.T) {
	t.Setenv("SNIP_JOBS_DATABASE_URL", "postgres://developer")
	t.Setenv("NOTIFY_SOCKET", "/run/systemd/notify")
	t.Setenv("WATCHDOG_USEC", "1000000")
	t.Setenv("CHILDPROC_KEPT", "yes")
	env := childproc.Env("SNIP_JOBS_INSTANCE=given")
	for _, kv := range env {
		if strings.HasPrefix(kv, "SNIP_JOBS_DATABASE_URL=") || strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "WATCHDOG_") {
			t.Errorf("Env kept %s", kv)
		}
	}
	for _, want := range []string{"CHILDPROC_KEPT=yes", "SNIP_JOBS_INSTANCE=given"} {
		if !slices.Contains(env, want) {
			t.Errorf("Env lacks %s", want)
		}
	}
}

func TestEveryStartAppendsToTheLogAndSeesTheFilteredEnvironment(t *testing.T) {
	t.Setenv("SNIP_JOBS_LEAK", "leaked")
	log := filepath.Join(t.TempDir(), "child.log")
	var seen []string
	for i := range 2 {
		out := childproc.Lines(func(l string) { seen = append(seen, l) })
		p, err := childproc.Start(childproc.Spec{
			Path: "/bin/sh", Args: []string{"-c", `echo "run $RUN ${SNIP_JOBS_LEAK:-clean}"; echo err >&2`},
			Env: []string{"RUN=" + string(rune('a'+i))}, Log: log,
			Stdout: out, Stderr: out, // one stream: its lines stay in order
		})
		if err != nil {
			t.Fatal(err)
		}
		<-p.Done()
		if p.Err() != nil || p.ExitCode() != 0 {
			t.Fatalf("run %d: %v, exit %d", i, p.Err(), p.ExitCode())
		}
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "run a clean\nerr\nrun b clean\nerr\n"; got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
	if want := []string{"run a clean", "err", "run b clean", "err"}; !slices.Equal(seen, want) {
		t.Errorf("output lines %q, want %q", seen, want)
	}
}

func TestStopTerminatesAPausedChildWithSIGTERM(t *testing.T) {
	p := start(t, `trap 'exit 7' TERM; echo ready; while :; do sleep 0.01; done`)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !p.Paused() {
		t.Fatal("Paused is false after SIGSTOP")
	}
	if err := p.Stop(context.Background(), patience); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if p.ExitCode() != 7 {
		t.Fatalf("exit code %d, want 7 (its SIGTERM trap)", p.ExitCode())
	}
}

func TestStopKillsAChildThatIgnoresSIGTERMAfterTheBound(t *testing.T) {
	p := start(t, `trap '' TERM; echo ready; while :; do sleep 0.01; done`)
	begin := time.Now()
	err := p.Stop(context.Background(), 200*time.Millisecond)
	if !errors.Is(err, childproc.ErrKilled) {
		t.Fatalf("Stop = %v, want ErrKilled", err)
	}
	if time.Since(begin) < 200*time.Millisecond {
		t.Fatalf("killed after %v, before the bound", time.Since(begin))
	}
	if !p.Exited() || p.ExitCode() != -1 {
		t.Fatalf("exited %v, code %d: want killed by a signal", p.Exited(), p.ExitCode())
	}
}

func TestStopWithAnEndedContextKillsAtOnce(t *testing.T) {
	p := start(t, `trap '' TERM; echo ready; while :; do sleep 0.01; done`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Stop(ctx, time.Hour); !errors.Is(err, childproc.ErrKilled) {
		t.Fatalf("Stop = %v, want ErrKilled", err)
	}
}

// The shell's sleep outlives it and holds its output pipe: Done must not wait
// for the sleep.
func TestWaitKillsAfterTheBound(t *testing.T) {
	p := start(t, `echo ready; sleep 600; echo never`)
	if p.Wait(100 * time.Millisecond) {
		t.Fatal("Wait reported that sleep 600 exited by itself")
	}
	if p.Signal(syscall.SIGTERM) == nil {
		t.Fatal("signalling an exited child succeeded")
	}
}

// start starts a shell running script, which must print "ready" once its
// traps are set, and kills it at the end of the test.
func start(t *testing.T, script string) *childproc.Proc {
	t.Helper()
	ready := make(chan struct{})
	p, err := childproc.Start(childproc.Spec{Path: "/bin/sh", Args: []string{"-c", script},
		Stdout: childproc.Lines(func(l string) {
			if l == "ready" {
				close(ready)
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	if strings.Contains(script, "echo ready") {
		select {
		case <-ready:
		case <-time.After(patience):
			t.Fatal("the child never said ready")
		}
	}
	return p
}
