package devcluster

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// fetch GETs url and returns the status and body; the connection is bounded
// only so that a hang fails the test instead of stalling it.
func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	client := http.Client{Timeout: benchtest.Patience}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// A killed instance's port, held by the supervisor, answers at once: 503 and
// a page that says it is down, links to the instances that run and offers a
// restart. Once a process takes the port again, the supervisor no longer
// answers it: the held socket is intact and the next process serves it.
func TestAKilledInstancesPortAnswersWithTheDownPageUntilItRunsAgain(t *testing.T) {
	c := cluster()
	ln := benchtest.Listen(t)
	dead, live := c.children[0], c.children[1]
	dead.socks = []sockact.Socket{{Name: "admin", Listener: ln}}
	dead.page = "http://" + ln.Addr().String() + "/status/"
	dead.exit = "killed by SIGKILL"
	live.state = stateRunning

	dead.serveDown()
	code, body := fetch(t, dead.page+"live")
	if code != http.StatusServiceUnavailable {
		t.Errorf("the killed instance's port answers %d, want 503", code)
	}
	for _, want := range []string{
		`server-1 is down`, `(killed by SIGKILL)`,
		`<a href="http://127.0.0.1:9472/status/">server-2</a>`,
		`<form method="post" action="http://127.0.0.1:9470/dev/restart"><input type="hidden" name="instance" value="server-1">`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the down page lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, `>server-3</a>`) {
		t.Errorf("the down page links to server-3, which does not run either:\n%s", body)
	}

	// The next process: the supervisor steps aside, the held socket serves it.
	dead.stopDown()
	next := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "the instance") })}
	served := make(chan struct{})
	go func() { defer close(served); _ = next.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = next.Shutdown(ctx)
		<-served
	})
	for range 5 { // more than one connection: none may reach the down page
		if code, body := fetch(t, dead.page); code != http.StatusOK || body != "the instance" {
			t.Fatalf("after the supervisor stepped aside the port answers %d %q, want the instance", code, body)
		}
	}
}

// While the cluster closes, an exiting instance's port is not taken over.
func TestNoDownPageWhileTheClusterCloses(t *testing.T) {
	c := cluster()
	c.closingNow = true
	ch := c.children[0]
	ch.socks = []sockact.Socket{{Name: "admin", Listener: benchtest.Listen(t)}}
	ch.serveDown()
	if ch.down != nil {
		ch.stopDown()
		t.Fatal("the supervisor answers an instance's port while the cluster closes")
	}
}

// The narration says why a term ended where the instance could record
// nothing: its process killed or paused.
func TestTheSupervisorSaysATermEndedWithAKilledOrPausedProcess(t *testing.T) {
	c := cluster()
	c.children[0].exit = "killed by SIGKILL"
	c.children[1].state = statePaused
	c.children[2].exit = "exit status 1"
	ctx := context.Background()
	for instance, want := range map[string]string{
		"server-1": "server-1 was killed by SIGKILL: no resign",
		"server-2": "server-2 is paused (SIGSTOP): its lease expired",
		"server-3": "server-3 exited (exit status 1) without resigning",
	} {
		if got := c.whyEnded(ctx, "heartbeat", instance, 7); got != want {
			t.Errorf("%s: %q, want %q", instance, got, want)
		}
	}
}
