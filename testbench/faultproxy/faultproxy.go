// Package faultproxy is the test bench's one fault proxy: a TCP forwarder
// between a client and one server (an etcd member, PostgreSQL) whose latency
// can be set, and which can be cut, while connections are open. The fault
// harness (testbench/chaos) puts one between every instance and every server;
// the tests' etcd clusters (testbench/etcdtest) put one in front of a member.
//
// Every chunk of bytes is held for the latency set when it was read before
// it is written on, in order, in each direction: a change of latency, as on a
// real link, applies to the bytes sent from then on, not to those in flight. A cut (a
// network partition) holds every byte, both ways, on open and new
// connections, until it heals, then delivers them in order: what a partition
// does to TCP, whose retransmissions deliver late but never lose or corrupt a
// stream. Connections stay open; an end that gives up (a keep-alive timeout)
// closes its own. (etcd's own fault proxy, go.etcd.io/etcd/pkg/v3/proxy, drops
// bytes while blackholed and leaves the HTTP/2 streams of a healed link
// desynchronised, which no real network does: clients then failed requests
// for seconds with "invalid gRPC request content-type".)
//
// The proxy closes a connection it cannot forward (so a client's connect
// fails rather than hangs while the server is down), and when one side closes
// it delivers what is still held before closing the other. It listens on
// 127.0.0.1 only. What it does not do: drop, reorder or corrupt bytes, or
// reset connections (a crash is a SIGKILL of the process, not a proxy fault).
package faultproxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/snip/snip-jobs/internal/sleep"
)

// dialTimeout bounds the connection to the server for each accepted client.
const dialTimeout = 2 * time.Second

// Proxy forwards the connections accepted on its loopback port to one server.
type Proxy struct {
	ln     net.Listener
	to     string
	mu     sync.Mutex
	delay  time.Duration
	cut    chan struct{} // non-nil while cut; closed when the cut heals
	conns  map[net.Conn]struct{}
	up     map[net.Conn]struct{} // the server side of conns
	closed bool
	life   context.Context // ended by Close
	end    context.CancelFunc
	wg     sync.WaitGroup
	onRead func() // tests: called once a chunk read is queued
}

// New starts a proxy on a free 127.0.0.1 port that forwards to the address
// to (host:port). The server does not have to be up.
func New(to string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, to: to, conns: map[net.Conn]struct{}{}, up: map[net.Conn]struct{}{}}
	p.life, p.end = context.WithCancel(context.Background())
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port (127.0.0.1).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay holds every chunk read from now on d (each way); chunks already
// read keep the latency they were read with. Zero or less forwards at once.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = max(d, 0)
	p.mu.Unlock()
}

// Delay is the latency SetDelay set.
func (p *Proxy) Delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// Partition cuts the link (on) or heals it (off). While cut, no byte goes
// through either way; healing delivers what was held, in order.
func (p *Proxy) Partition(on bool) {
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
func (p *Proxy) waitHealed() bool {
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut == nil {
		return true
	}
	select {
	case <-cut:
		return true
	case <-p.life.Done():
		return false
	}
}

func (p *Proxy) track(c net.Conn, add bool) bool {
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

// UpstreamPorts returns the local ports of the open connections to the
// server: what PostgreSQL shows as their client_port.
func (p *Proxy) UpstreamPorts() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int32
	for c := range p.up {
		out = append(out, int32(c.LocalAddr().(*net.TCPAddr).Port))
	}
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.to, dialTimeout)
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
	due  time.Time // when it was read, plus the latency then
	data []byte
}

// pipe copies src to dst, each chunk delayed; at src's end it delivers what is
// held, then closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{due: time.Now().Add(p.Delay()), data: append([]byte(nil), buf[:n]...)}
				if p.onRead != nil {
					p.onRead()
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if !sleep.Until(p.life, c.due) || !p.waitHealed() {
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

// Close stops accepting, closes every open connection and waits until the
// proxy's goroutines have ended. Bytes still held are dropped.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.end()
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
