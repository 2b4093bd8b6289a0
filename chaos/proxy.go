package chaos

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
)

// etcdProxy is etcd's fault proxy (go.etcd.io/etcd/pkg/v3/proxy) between one
// instance and one etcd member: blackholing it cuts that instance off from
// that member, on open connections as well as new ones.
type etcdProxy struct {
	srv      proxy.Server
	endpoint string
	drained  chan struct{}
}

func newEtcdProxy(to string) (*etcdProxy, error) {
	tu, err := url.Parse(to)
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	from := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	srv := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: from, To: *tu})
	select {
	case <-srv.Ready():
	case <-srv.Done():
		return nil, fmt.Errorf("etcd proxy on %s did not start", from.Host)
	}
	p := &etcdProxy{srv: srv, endpoint: from.String(), drained: make(chan struct{})}
	// The proxy reports every failed dial, read and write on a channel of 16;
	// once it is full, its loops block. Drain it for the proxy's life.
	go func() {
		defer close(p.drained)
		for {
			select {
			case <-srv.Error():
			case <-srv.Done():
				return
			}
		}
	}()
	return p, nil
}

func (p *etcdProxy) blackhole(on bool) {
	if on {
		p.srv.BlackholeTx()
		p.srv.BlackholeRx()
	} else {
		p.srv.UnblackholeTx()
		p.srv.UnblackholeRx()
	}
}

func (p *etcdProxy) close() {
	done := make(chan struct{})
	go func() { _ = p.srv.Close(); <-p.drained; close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second): // open connections end when their ends close
	}
}

// delayProxy is a TCP forwarder whose latency can be set at run time: every
// chunk of bytes is held for the latency (measured from when it was read)
// before it is written on, in order, in each direction. Unlike etcd's proxy
// it closes a connection it cannot forward (so a client's connect fails
// rather than hangs while the server is down), and when one side closes it
// delivers what is still held before closing the other.
type delayProxy struct {
	ln     net.Listener
	to     string
	mu     sync.Mutex
	delay  time.Duration
	conns  map[net.Conn]struct{}
	up     map[net.Conn]struct{} // the upstream side of conns
	closed bool
	wg     sync.WaitGroup
}

func newDelayProxy(to string) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, to: to, conns: map[net.Conn]struct{}{}, up: map[net.Conn]struct{}{}}
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
