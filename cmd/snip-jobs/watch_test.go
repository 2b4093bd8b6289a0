package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// openPTY opens a pseudo-terminal: the test reads the master, the command
// writes to the slave as it would to an operator's terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("TIOCGPTN: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pty: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open the pty's slave: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// terminal collects what a command writes to a pty, as frames of --watch.
type terminal struct {
	chunks chan []byte // what each read of the master returned; closed at EOF
	screen []byte
}

func readTerminal(master *os.File) *terminal {
	term := &terminal{chunks: make(chan []byte, 64)}
	go func() {
		defer close(term.chunks)
		for {
			buf := make([]byte, 4096)
			n, err := master.Read(buf)
			if n > 0 {
				term.chunks <- buf[:n]
			}
			if err != nil { // EIO once the slave's last holder is gone
				return
			}
		}
	}()
	return term
}

// frames are the redraws so far: what follows each clear-screen.
func (term *terminal) frames() []string {
	parts := strings.Split(strings.ReplaceAll(string(term.screen), "\r\n", "\n"), clearScreen)
	return parts[1:]
}

// waitFrame reads the terminal until a complete frame (one followed by the
// next clear-screen) satisfies cond, and returns how many frames came before.
func (term *terminal) waitFrame(t *testing.T, what string, cond func(frame string) bool) int {
	t.Helper()
	timeout := time.After(waitLong)
	for {
		frames := term.frames()
		for i := 0; i+1 < len(frames); i++ {
			if cond(frames[i]) {
				return i
			}
		}
		select {
		case b, ok := <-term.chunks:
			if !ok {
				t.Fatalf("the terminal closed before %s:\n%q", what, term.screen)
			}
			term.screen = append(term.screen, b...)
		case <-timeout:
			t.Fatalf("no frame with %s within %v:\n%q", what, waitLong, term.screen)
		}
	}
}

// On a terminal, status --watch redraws the whole table again and again with
// what etcd and PostgreSQL say now (a leader appears once an instance runs),
// and Ctrl-C ends it with status 0 and nothing half drawn.
func TestStatusWatchRedrawsTheTableOnATerminalUntilCtrlC(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	url := benchtest.PostgresDB(t)
	env := dbEnv(url)
	c := config{instance: "server-a", endpoints: []string{etcd.Endpoint(0)}, jobs: pulseJob}
	path := writeConfig(t, c)
	migrate(t, path, url)

	master, slave := openPTY(t)
	cmd := exec.Command(binary, "status", "--watch", "--config", path)
	cmd.Env = append(baseEnv(), env...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = slave, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close() // the command holds it now: its exit closes the terminal
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	term := readTerminal(master)

	noLeader := term.waitFrame(t, "pulse without a leader", func(f string) bool {
		return strings.Contains(f, "snip-jobs status, every 1s") && len(linesWith(f, "pulse", "leader", "none")) == 1
	})
	in := start(t, c, env)
	in.waitReady()
	led := term.waitFrame(t, "server-a leading pulse", func(f string) bool {
		return len(linesWith(f, "pulse", "leader", "server-a")) == 1 && strings.Contains(f, "instances up: server-a")
	})
	if led <= noLeader {
		t.Fatalf("frame %d shows the leader, frame %d none: want the leader in a later redraw", led, noLeader)
	}
	for i, f := range term.frames()[:led+1] {
		if !strings.HasPrefix(f, "snip-jobs status, every 1s") || !strings.Contains(f, "JOB") {
			t.Errorf("frame %d is not a whole table:\n%s", i, f)
		}
	}

	// Ctrl-C: the terminal sends SIGINT.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-exited:
	case <-time.After(waitLong):
		t.Fatal("status --watch did not exit after SIGINT")
	}
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("status --watch after SIGINT: %v (want exit 0)\nstderr: %s", err, stderr.String())
	}
	for b := range term.chunks { // the rest, up to the terminal's close
		term.screen = append(term.screen, b...)
	}
	frames := term.frames()
	if last := frames[len(frames)-1]; !strings.Contains(last, "JOB") || len(linesWith(last, "pulse", "leader")) != 1 {
		t.Errorf("the last frame is not a whole table:\n%s", last)
	}
	in.signal(syscall.SIGTERM)
	if code := in.wait(); code != 0 {
		t.Errorf("the instance exited %d after SIGTERM", code)
	}
}

func TestStatusWatchRefusesJSON(t *testing.T) {
	t.Parallel()
	r := snip(t, nil, "status", "--watch", "--json")
	if r.code != 2 || !strings.Contains(r.stderr, "--watch redraws the table: it does not go with --json") {
		t.Errorf("status --watch --json: exit %d\n%s", r.code, r.stderr)
	}
}
