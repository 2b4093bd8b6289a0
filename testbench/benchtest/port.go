package benchtest

import (
	"net"
	"testing"
)

// Listen binds a free loopback TCP port and holds it until the test ends: a
// port no other test can take meanwhile, to serve on or to pass to a child
// process (package sockact).
func Listen(t testing.TB) *net.TCPListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("benchtest: listen on a free port: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.(*net.TCPListener)
}
