package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// validate refuses transaction control in a sql job's statement however it
// is spelled: "; COMMIT" is one statement, COMMIT, behind an empty one
// (PostgreSQL's lexer drops it), and used to pass validate, to fail only
// when it ran. Reported at the statement's file:line:col, exit 2.
func TestValidateRefusesTransactionControlBehindAnEmptyStatement(t *testing.T) {
	t.Parallel()
	n := newNamedFiles(t)
	path := n.config("commit.yaml",
		"instance: server-1",
		"jobs:",
		"  - name: the-job",
		"    type: sql",
		"    every: 1h",
		"    options:",
		`      statement: "; COMMIT"`, // 7:18
	)
	r := snip(t, nil, "validate", "--config", path)
	want := path + `:7:18: job "the-job": options.statement: COMMIT is transaction control`
	if r.code != 2 || len(linesWith(r.stderr, want)) != 1 {
		t.Errorf("exit %d, want 2 and a line starting %q; stderr:\n%s", r.code, want, r.stderr)
	}
}

// An operator's reason and name are capped before anything is contacted:
// pause --reason and drain --reason at 500 characters, --by at 200 (a
// reason of 131 KB used to be stored, and shown on every status page). A
// usage error, exit 2, saying the cap.
func TestAReasonOrANameLongerThanItsCapIsBadUsage(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("é", n) } // characters, not bytes
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "--reason", long(501), "some-job"}, "usage: the reason (--reason) is 501 characters long; it may be at most 500"},
		{[]string{"drain", "--reason", long(60000)}, "usage: the reason (--reason) is 60000 characters long; it may be at most 500"},
		{[]string{"pause", "--by", long(201), "some-job"}, "usage: who asks (--by) is 201 characters long; it may be at most 200"},
		{[]string{"resume", "--by", long(201), "some-job"}, "usage: who asks (--by) is 201 characters long; it may be at most 200"},
		{[]string{"undrain", "--by", long(201)}, "usage: who asks (--by) is 201 characters long; it may be at most 200"},
		{[]string{"run", "--by", long(201), "some-job"}, "usage: who asks (--by) is 201 characters long; it may be at most 200"},
	} {
		args := append(c.args[:len(c.args):len(c.args)], "--config", "/nonexistent/snip-jobs.yaml")
		r := snip(t, nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, "Run 'snip-jobs "+c.args[0]+" --help' for usage.") {
			t.Errorf("%s %s: exit %d, want 2 and %q; stderr:\n%.400s", c.args[0], c.args[1], r.code, c.want, r.stderr)
		}
	}
}

// hungPostgres stands in for a PostgreSQL server that accepts connections
// and never answers: it holds every connection until the test ends.
type hungPostgres struct {
	ln       net.Listener
	accepted chan struct{} // closed at the first connection
}

func newHungPostgres(t *testing.T) *hungPostgres {
	t.Helper()
	h := &hungPostgres{ln: benchtest.Listen(t), accepted: make(chan struct{})}
	var once sync.Once
	go func() {
		for {
			c, err := h.ln.Accept()
			if err != nil {
				return
			}
			once.Do(func() { close(h.accepted) })
			go func() { defer c.Close(); _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	return h
}

func (h *hungPostgres) url() string {
	return fmt.Sprintf("postgres://snip@%s/snip?sslmode=disable", h.ln.Addr())
}

// The admin listener and the HTTP-01 challenge listener answer at once,
// whatever PostgreSQL does: with a PostgreSQL that accepts connections and
// never answers, /healthz and the challenge listener answer before the
// service has given up waiting for PostgreSQL's first answer (it used to
// serve neither until its ping had given up, 5 s), and /readyz says what is
// missing. One SIGTERM then stops the start-up.
func TestTheListenersAnswerWhilePostgreSQLDoesNot(t *testing.T) {
	t.Parallel()
	pg := newHungPostgres(t)
	n := newNamedFiles(t)
	keys := n.regular("keys", "a2V5\n", 0o600)
	challenge := benchtest.Listen(t)
	in := start(t, config{
		instance:  "server-1",
		endpoints: []string{"http://" + benchtest.Listen(t).Addr().String()}, // an etcd that never answers either
		passed:    []sockact.Socket{{Name: "challenge", Listener: challenge}},
		jobs:      "\n  - name: renewer\n    type: certrenew\n    every: 1h\n    options:\n      key_file: " + keys + "\n",
	}, dbEnv(pg.url()))
	<-pg.accepted // the service is waiting on PostgreSQL
	eventually(t, "/healthz", func() bool {
		code, _ := in.get("/healthz")
		return code == http.StatusOK
	})
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + challenge.Addr().String() + "/")
	if err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("the challenge listener: %v, %v; want its 404 for a path that is no challenge", resp, err)
	} else {
		resp.Body.Close()
	}
	if gaveUp := linesWith(in.logs(), "PostgreSQL does not answer yet"); len(gaveUp) != 0 {
		t.Errorf("the service had given up waiting for PostgreSQL before its listeners answered:\n%s", gaveUp[0])
	}
	if code, body := in.get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not yet compared") {
		t.Errorf("/readyz: %d %q; want 503 saying the schema is not yet compared", code, body)
	}
	// A start-up waiting on a PostgreSQL and an etcd that never answer
	// stops at the first SIGTERM.
	in.signal(syscall.SIGTERM)
	if code := in.wait(); code != 0 || len(linesWith(in.logs(), "stopped during start-up")) != 1 {
		t.Errorf("after one SIGTERM during start-up: %s; want a clean stop during start-up", in.state())
	}
}
