package sockact_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// The test binary doubles as the child: with SOCKACT_CHILD set it takes the
// sockets it was passed and serves HTTP on each, answering "<name> <pid>
// <LISTEN_FDS as the child now sees it>"; when it was passed none, or they are
// wrong, it prints that and exits.
func TestMain(m *testing.M) {
	if os.Getenv("SOCKACT_CHILD") == "1" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

func child() int {
	lns, err := sockact.Inherited()
	if err != nil {
		fmt.Println("error:", err)
		return 3
	}
	if len(lns) == 0 {
		fmt.Println("no sockets")
		return 4
	}
	var names []string
	for name, ln := range lns {
		names = append(names, name)
		go func() {
			_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprintf(w, "%s %d %q", name, os.Getpid(), os.Getenv("LISTEN_FDS"))
			}))
		}()
	}
	sort.Strings(names)
	fmt.Println("serving", strings.Join(names, ","))
	select {}
}

// startChild starts the child with socks and returns it once it says what it
// serves (or that it could not).
func startChild(t *testing.T, socks ...sockact.Socket) (*exec.Cmd, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "SOCKACT_CHILD=1")
	files, err := sockact.Pass(cmd, socks...)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, cmd, files)
}

func run(t *testing.T, cmd *exec.Cmd, files []*os.File) (*exec.Cmd, string) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the child said nothing: %v", err)
	}
	return cmd, strings.TrimSpace(line)
}

func get(t *testing.T, ln net.Listener) string {
	t.Helper()
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatalf("GET from %s: %v", ln.Addr(), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAChildServesThePassedSocketsByNameAndSeesNoActivationVariables(t *testing.T) {
	admin, web := benchtest.Listen(t), benchtest.Listen(t)
	cmd, said := startChild(t, sockact.Socket{Name: "admin", Listener: admin}, sockact.Socket{Name: "web", Listener: web})
	if said != "serving admin,web" {
		t.Fatalf("the child said %q, want it to serve admin and web", said)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	// The pid the child answers with is the one we started (sh exec'd it in
	// place), and the variables are gone from its environment once taken.
	if got, want := get(t, admin), "admin "+pid+` ""`; got != want {
		t.Errorf("admin socket answered %q, want %q", got, want)
	}
	if got, want := get(t, web), "web "+pid+` ""`; got != want {
		t.Errorf("web socket answered %q, want %q", got, want)
	}
}

func TestTheSupervisorKeepsThePortAcrossRestartsAndNothingIsRefusedInBetween(t *testing.T) {
	ln := benchtest.Listen(t)
	addr := ln.Addr().String()
	first, _ := startChild(t, sockact.Socket{Name: "web", Listener: ln})
	if got := get(t, ln); !strings.HasPrefix(got, fmt.Sprintf("web %d ", first.Process.Pid)) {
		t.Fatalf("first child answered %q", got)
	}
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	// No child now: the port is still bound (nobody else can take it), and a
	// client's connection is accepted into the backlog, not refused.
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("with no child running, connecting to %s failed: %v", addr, err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Listen("tcp", addr); err == nil {
		t.Fatalf("another listener could bind %s while no child ran", addr)
	}

	second, _ := startChild(t, sockact.Socket{Name: "web", Listener: ln})
	if ln.Addr().String() != addr {
		t.Fatalf("the port changed: %s → %s", addr, ln.Addr())
	}
	// The request sent while no child ran is answered by the next one.
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the request made between the children was not answered: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("web %d ", second.Process.Pid); !strings.HasPrefix(string(body), want) {
		t.Errorf("the waiting request was answered with %q, want it from the second child (%q…)", body, want)
	}
}

func TestVariablesMeantForAnotherProcessAreIgnored(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// systemd's variables inherited from a parent that was activated: the
	// pid is not ours, so there is nothing for us.
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "SOCKACT_CHILD=1", "LISTEN_PID=1", "LISTEN_FDS=1", "LISTEN_FDNAMES=web")
	_, said := run(t, cmd, nil)
	if said != "no sockets" {
		t.Errorf("the child said %q, want no sockets", said)
	}
}

func TestAPassedDescriptorThatIsNotAListeningSocketIsAClearError(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$; export LISTEN_PID; exec "$0"`, exe)
	cmd.Env = append(os.Environ(), "SOCKACT_CHILD=1", "LISTEN_FDS=1", "LISTEN_FDNAMES=web")
	cmd.ExtraFiles = []*os.File{r}
	_, said := run(t, cmd, []*os.File{r})
	if !strings.Contains(said, "error:") || !strings.Contains(said, "descriptor 3 (web) is not a listening socket") {
		t.Errorf("the child said %q, want an error naming descriptor 3 (web)", said)
	}
}

func TestTwoSocketsUnderOneNameAreRefused(t *testing.T) {
	_, said := startChild(t, sockact.Socket{Name: "web", Listener: benchtest.Listen(t)}, sockact.Socket{Name: "web", Listener: benchtest.Listen(t)})
	if !strings.Contains(said, `two passed sockets are named "web"`) {
		t.Errorf("the child said %q, want the duplicate name refused", said)
	}
}

func TestPassRefusesWhatItCannotDo(t *testing.T) {
	ln := benchtest.Listen(t)
	for _, tc := range []struct {
		name string
		cmd  func() *exec.Cmd
		sock sockact.Socket
		want string
	}{
		{"a name with a colon", func() *exec.Cmd { return exec.Command("/bin/true") }, sockact.Socket{Name: "a:b", Listener: ln}, "must be non-empty"},
		{"an empty name", func() *exec.Cmd { return exec.Command("/bin/true") }, sockact.Socket{Listener: ln}, "must be non-empty"},
		{"extra files already", func() *exec.Cmd {
			c := exec.Command("/bin/true")
			c.ExtraFiles = []*os.File{os.Stdin}
			return c
		}, sockact.Socket{Name: "web", Listener: ln}, "extra files already"},
		{"a program not found", func() *exec.Cmd { return exec.Command("no-such-program-sockact") }, sockact.Socket{Name: "web", Listener: ln}, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sockact.Pass(tc.cmd(), tc.sock)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Pass: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
