package certrenew_test

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

// frontDoor is what the CA reaches at port 80 of every domain: a TCP
// forwarder (a layer-4 load balancer) to the instances' challenge servers,
// round robin over the current targets.
type frontDoor struct {
	ln      net.Listener
	mu      sync.Mutex
	targets []string
	next    int
}

func newFrontDoor(t testing.TB) *frontDoor {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &frontDoor{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go f.accept()
	return f
}

func (f *frontDoor) port() int { return f.ln.Addr().(*net.TCPAddr).Port }

func (f *frontDoor) route(addrs ...string) {
	f.mu.Lock()
	f.targets, f.next = addrs, 0
	f.mu.Unlock()
}

func (f *frontDoor) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		var target string
		if len(f.targets) > 0 {
			target = f.targets[f.next%len(f.targets)]
			f.next++
		}
		f.mu.Unlock()
		go func() {
			defer c.Close()
			if target == "" {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
			<-done
		}()
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func waitListening(t testing.TB, addr string) {
	t.Helper()
	benchtest.Eventually(t, addr+" to accept connections", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}
