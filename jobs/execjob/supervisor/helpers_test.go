package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/internal/boottime"
	"golang.org/x/sys/unix"
)

// The test binary is three programs: the tests; with Arg first, a
// supervisor (so the default Spec.Binary, this process's own executable,
// serves and nothing is built); with
// callerEnv set, a caller that starts a run and waits (see caller_test.go).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Arg {
		os.Exit(Main())
	}
	if os.Getenv(callerEnv) != "" {
		os.Exit(actAsCaller())
	}
	// The tests' process is a subreaper too: a process that escaped its
	// supervisor would re-parent here, where noneLeft finds it. And it is
	// non-dumpable, as snip-jobs run is: its runs still start their
	// supervisor from /proc/self/exe.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "prctl(PR_SET_CHILD_SUBREAPER):", err)
		os.Exit(1)
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "prctl(PR_SET_DUMPABLE):", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// The programs are /bin/sh scripts. Each process of interest runs
// `eval "$SAY"`, which prints "pid <pid> <start time>": its identity, taken
// while it surely lives, so that the test can tell it from a later process
// given the same pid. `sh -c "$LEAF"` is a process that says so and sleeps.
var programEnv = []string{
	"PATH=/usr/bin:/bin",
	`SAY=echo "pid $$ $(cut -d' ' -f22 /proc/$$/stat)"`,
	`LEAF=eval "$SAY"; exec sleep 1000`,
}

// run is a program under its supervisor, with the program's stdout read a
// line at a time.
type run struct {
	*Process
	out <-chan string // closed at EOF: once the supervisor, the last holder, exited
}

// start runs script under a supervisor (the test binary), with a grace of a
// second unless edit changes the spec. The run is stopped at the test's end.
func start(t testing.TB, script string, edit ...func(*Spec)) *run {
	t.Helper()
	r, err := tryStart(t, script, edit...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryStart is start returning Start's error.
func tryStart(t testing.TB, script string, edit ...func(*Spec)) (*run, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := filepath.Join(t.TempDir(), "stderr")
	errFile, err := os.Create(stderr)
	if err != nil {
		t.Fatal(err)
	}
	s := Spec{Path: "/bin/sh", Args: []string{"-c", script}, Env: programEnv, Stdout: w, Stderr: errFile,
		Grace: time.Second, Label: t.Name()} // Binary "": this test binary, from /proc/self/exe
	for _, e := range edit {
		e(&s)
	}
	p, err := Start(t.Context(), s)
	w.Close()
	errFile.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	t.Cleanup(func() {
		p.Stop(0)
		<-p.Done()
		if b, _ := os.ReadFile(stderr); t.Failed() && len(b) > 0 {
			t.Logf("the program's stderr:\n%s", b)
		}
	})
	return &run{Process: p, out: lines(r)}, nil
}

// startWithDeadline starts script with a deadline a lead ahead, and calls
// ready, if given, once it runs. While the machine is too slow for the test
// to tell anything (Start found no time left, or ready says so), it stops
// that run and tries again with twice the lead.
func startWithDeadline(t testing.TB, grace time.Duration, script string, ready ...func(*run, time.Duration) bool) (*run, time.Duration) {
	t.Helper()
	for lead := time.Second; ; lead *= 2 {
		deadline := boottime.Now() + lead
		r, err := tryStart(t, script, func(s *Spec) { s.Deadline, s.Grace = deadline, grace })
		switch {
		case errors.Is(err, ErrNoTimeLeft):
		case err != nil:
			t.Fatal(err)
		case len(ready) == 0 || ready[0](r, deadline):
			return r, deadline
		default:
			r.Stop(0)
			<-r.Done()
		}
		t.Logf("a lead of %v was too short on this machine for the test to tell anything; trying twice that", lead)
	}
}

func testBinary(t testing.TB) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// lines reads r a line at a time until EOF.
func lines(r *os.File) <-chan string {
	ch := make(chan string, 1<<16)
	go func() {
		defer close(ch)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// pids reads lines until n processes said who they are, and returns them.
func pids(t testing.TB, out <-chan string, n int) []ident {
	t.Helper()
	got, ok := tryPids(out, n)
	if !ok {
		t.Fatalf("the output ended after %d of %d processes said who they are", len(got), n)
	}
	return got
}

// tryPids is pids, saying whether n processes spoke before the output ended.
func tryPids(out <-chan string, n int) ([]ident, bool) {
	var got []ident
	for len(got) < n {
		line, ok := <-out
		if !ok {
			return got, false
		}
		if id, ok := said(line); ok {
			got = append(got, id)
		}
	}
	return got, true
}

// said parses a line of $SAY.
func said(line string) (ident, bool) {
	var id ident
	_, err := fmt.Sscanf(line, "pid %d %d", &id.pid, &id.start)
	return id, err == nil
}

// rest reads what is left of the output, to its end.
func rest(out <-chan string) []string {
	var all []string
	for line := range out {
		all = append(all, line)
	}
	return all
}

// assertGone checks that none of the processes exists any more, not even
// as a zombie: a supervisor that reported its tree gone reaped them all.
func assertGone(t testing.TB, ids []ident) {
	t.Helper()
	for _, id := range ids {
		if p, err := readStat(id.pid); err == nil && p.start == id.start {
			t.Errorf("process %d (started at tick %d) still exists, state %c", id.pid, id.start, p.state)
		}
	}
}

// noneLeft checks that no process descends from the tests' process any
// more: not a supervisor, not anything that escaped one.
func noneLeft(t testing.TB) {
	t.Helper()
	procs, err := descendants(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if !p.dead() {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
			t.Errorf("process %d (parent %d) is still running: %s", p.pid, p.ppid, strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
}

// sleepUntil waits for an instant of CLOCK_BOOTTIME to pass.
func sleepUntil(at time.Duration) {
	for now := boottime.Now(); now < at; now = boottime.Now() {
		time.Sleep(at - now)
	}
}

// waitExit waits for a process that is not the test's child to exit, on a
// pidfd (readable once it has exited).
func waitExit(t testing.TB, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	for {
		_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
		if err == nil {
			return
		}
		if err != unix.EINTR {
			t.Fatalf("poll on the pidfd of %d: %v", pid, err)
		}
	}
}
