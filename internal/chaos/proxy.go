package chaos

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// delayProxy is a TCP forwarder between one instance and one server (an etcd
// member, PostgreSQL) whose latency can be set, and which can be cut, at run
// time: every chunk of bytes is held for the latency (measured from when it
// was read) before it is written on, in order, in each direction.
//
// A cut (partition) holds every byte, both ways, on open and new connections,
// until it heals, then delivers them in order: what a network partition does
// to TCP, whose retransmissions deliver late but never lose or corrupt a
// stream. Connections stay open; an end that gives up (a keep-alive timeout)
// closes its own. (etcd's fault proxy, used before, drops bytes while
// blackholed and leaves the HTTP/2 streams of a healed link desynchronised,
// which no real network does: clients then failed requests for seconds with
// "invalid gRPC request content-type".)
//
// The proxy closes a connection it cannot forward (so a client's connect
// fails rather than hangs while the server is down), and when one side
// closes it delivers what is still held before closing the other.
type delayProxy struct {
	ln     net.Listener
	to     string
	mu     sync.Mutex
	delay  time.Duration
	cut    chan struct{} // non-nil while cut; closed when the cut heals
	conns  map[net.Conn]struct{}
	up     map[net.Conn]struct{} // the upstream side of conns
	closed bool
	done   chan struct{} // closed by close
	wg     sync.WaitGroup
}

func newDelayProxy(to string) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, to: to, conns: map[net.Conn]struct{}{}, up: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *delayProxy) latency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// partition cuts the link (on) or heals it.
func (p *delayProxy) partition(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.cut == nil:
		p.cut = make(chan struct{})
	case !on && p.cut != nil:
		close(p.cut)
		p.cut = nil
	}
}

// waitHealed returns once the link is not cut, or false when the proxy closes first.
func (p *delayProxy) waitHealed() bool {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut == nil {
		return true
	}
	select {
	case <-cut:
		return true
	case <-p.done:
		return false
	}
}

func (p *delayProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.closed {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
		delete(p.up, c)
	}
	return true
}

// upstreamPorts returns the local ports of the open connections to the
// server: what PostgreSQL shows as their client_port.
func (p *delayProxy) upstreamPorts() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int32
	for c := range p.up {
		out = append(out, int32(c.LocalAddr().(*net.TCPAddr).Port))
	}
	return out
}

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.to, 2*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, true) || !p.track(out, true) {
			in.Close()
			out.Close()
			return
		}
		p.mu.Lock()
		p.up[out] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

type chunk struct {
	at   time.Time
	data []byte
}

// pipe copies src to dst, each chunk delayed; at src's end it delivers what is
// held, then closes both.
func (p *delayProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{at: time.Now(), data: append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.at.Add(p.latency())); d > 0 {
			time.Sleep(d)
		}
		if !p.waitHealed() {
			break
		}
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	dst.Close()
	src.Close() // ends the reader, if src is still open
	for range q {
	}
	p.track(dst, false)
	p.track(src, false)
}

func (p *delayProxy) close() error {
	p.mu.Lock()
	p.closed = true
	close(p.done)
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// freePorts returns n distinct ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
