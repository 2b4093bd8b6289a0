package admin_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/app/admin"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// rebindingClient is a browser after DNS rebinding: it asks for URLs under
// the attacker's name, which its resolver now points at 127.0.0.1, so its
// requests reach the admin listener with the attacker's name as Host.
func rebindingClient(listener string) *http.Client {
	dialer := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, listener)
		},
	}}
}

func fetch(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// DNS rebinding: a page on rebind.attacker.example re-points its name at
// 127.0.0.1 and reads /status and /metrics through it. Only loopback names,
// IP addresses and http.allowed_hosts are answered; other Hosts get 421.
func TestARequestNamingAnotherHostIsRefused(t *testing.T) {
	s := serve(t, admin.Config{Instance: "server-1", AllowedHosts: []string{"snip-1.internal"}})
	_, port, _ := net.SplitHostPort(s.Addr().String())
	c := rebindingClient(s.Addr().String())
	for _, host := range []string{"rebind.attacker.example", "snip-1.internal.attacker.example", "localhost.attacker.example", "internal"} {
		for _, path := range []string{"/status", "/metrics", "/healthz"} {
			code, body := fetch(t, c, "http://"+host+":"+port+path)
			if code != http.StatusMisdirectedRequest || !strings.Contains(body, "http.allowed_hosts") || strings.Contains(body, "server-1") {
				t.Errorf("GET %s through %s: %d %q, want 421 naming http.allowed_hosts and nothing of the instance", path, host, code, body)
			}
		}
	}
	for _, host := range []string{"127.0.0.1", "localhost", "LocalHost.", "app.localhost", "[::1]", "10.1.2.3", "snip-1.internal", "SNIP-1.internal."} {
		for _, withPort := range []bool{true, false} {
			h := host
			if withPort {
				h += ":" + port
			}
			req, _ := http.NewRequest("GET", "http://"+s.Addr().String()+"/status", nil)
			req.Host = h
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET /status with Host %s: %d, want 200", h, resp.StatusCode)
			}
		}
	}
}

// rawConn opens a connection to the admin server that the test drives byte by
// byte, closed at the end of the test.
func rawConn(t *testing.T, s *admin.Server) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reads c until the server closes it (the test's patience
// bounds only a failure) and returns what it read.
func closedByServer(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(benchtest.Patience))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open (read so far: %q)", b)
	}
	return string(b)
}

// A client that sends its request headers slowly and never finishes (slow
// loris) is cut off after ReadTimeout, as is a connection idle after its
// request was answered.
func TestSlowAndIdleConnectionsAreClosed(t *testing.T) {
	s := serve(t, admin.Config{ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})

	loris := rawConn(t, s)
	if _, err := io.WriteString(loris, "GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	if got := closedByServer(t, loris); strings.Contains(got, "200 OK") {
		t.Errorf("the unfinished request was answered: %q", got)
	}

	idle := rawConn(t, s)
	if _, err := io.WriteString(idle, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request on the keep-alive connection: %v %v", resp, err)
	}
	resp.Body.Close()
	closedByServer(t, idle)
}

// A client that stops reading the answer (slow read) holds the handler only
// until WriteTimeout: its writes then fail and it returns.
func TestAClientThatStopsReadingIsCutOffAtTheWriteTimeout(t *testing.T) {
	mux := http.NewServeMux()
	returned := make(chan error, 1)
	mux.HandleFunc("GET /endless", func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 64<<10))
		for {
			if _, err := w.Write(chunk); err != nil {
				returned <- err
				return
			}
		}
	})
	s := serve(t, admin.Config{Mux: mux, WriteTimeout: 300 * time.Millisecond})
	c := rawConn(t, s)
	if _, err := io.WriteString(c, "GET /endless HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The test reads nothing: the socket buffers fill and the handler's
	// writes block until the deadline fails them.
	select {
	case err := <-returned:
		t.Logf("the handler's write failed: %v", err)
	case <-time.After(benchtest.Patience):
		t.Fatal("the handler is still writing to a client that reads nothing")
	}
}
