package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/snip/snip-jobs/app/etcdlocal"
	"github.com/snip/snip-jobs/testbench/etcdtlstest"
	"github.com/snip/snip-jobs/testbench/faultproxy"
	"github.com/snip/snip-jobs/testbench/freeport"
)

// Bounds for waiting on etcd. They are generous on purpose: they only decide
// how long a broken environment takes to report itself, never whether a
// healthy one passes.
const (
	etcdReadyTimeout  = 60 * time.Second // Start/Restart until every started member is ready
	etcdLeaderTimeout = 30 * time.Second // LeaderIndex until the running members agree
	etcdPollInterval  = 10 * time.Millisecond
	etcdDialTimeout   = 5 * time.Second // clientv3.Config.DialTimeout of Client
	etcdStartAttempts = 3               // fresh ports when a reserved port was taken meanwhile
	etcdBcryptCost    = 4               // bcrypt.MinCost: see etcdMember.config
)

// Cluster is a cluster of real etcd members running in the test process.
// Member i is named "m<i>"; its client and peer URLs, data directory and raft
// member ID stay the same across Stop and Restart.
type Cluster struct {
	mu      sync.Mutex // guards members[*].etcd; held during Stop and Restart
	members []*etcdMember
	secure  *Security // nil: plain http, no authentication
}

// Security is the TLS material and the users of a cluster started by
// StartSecure.
type Security struct {
	PKI  *etcdtlstest.PKI
	Auth etcdtlstest.Auth
}

type etcdMember struct {
	tls       *etcdtlstest.PKI // nil: plain http
	name      string
	dir       string
	clientURL url.URL
	peerURL   url.URL
	etcd      *embed.Etcd   // nil while stopped
	stopping  chan struct{} // closed to cut the running etcd's client streams
}

// Start starts an n-member etcd cluster (n is 1 or 3) and waits until
// every member is ready and the cluster has a leader. Each member has its own
// data directory under t.TempDir() and listens on free 127.0.0.1 ports.
// The members are stopped at t.Cleanup.
//
// The members use etcd's default timing (100 ms heartbeat, 1 s election
// timeout) and skip fsync (UnsafeNoFsync): they stop, or are killed, inside
// the test process, whose writes the kernel keeps, so nothing depends on
// durability across a machine crash.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return startEtcd(t, n, nil)
}

// StartSecure starts an n-member cluster as Start does, whose members
// serve clients over TLS only (https:// client URLs, a server certificate for
// 127.0.0.1 signed by a CA made for the test, and a client certificate of
// that CA required), with authentication enabled: a root user, and a user
// whose role may read and write the keys under prefix and nothing else (the
// grants of docs/operations.md, see etcdtlstest.Grant). Client returns clients
// that log in as root; Security gives the files and users for snip-jobs.
func StartSecure(t testing.TB, n int, prefix string) *Cluster {
	t.Helper()
	pki, err := etcdtlstest.NewPKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatalf("etcdtest: StartSecure: %v", err)
	}
	c := startEtcd(t, n, pki)
	admin := c.client(t, c.Endpoints(), "", "") // auth still off
	a := etcdtlstest.NewAuth(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), etcdReadyTimeout)
	defer cancel()
	if err := etcdtlstest.Grant(ctx, admin, a); err != nil {
		t.Fatalf("etcdtest: StartSecure: %v", err)
	}
	_ = admin.Close()
	c.secure = &Security{PKI: pki, Auth: a}
	return c
}

// Security returns the TLS files and users of a cluster started by
// StartSecure, nil for a plain one.
func (c *Cluster) Security() *Security { return c.secure }

func startEtcd(t testing.TB, n int, pki *etcdtlstest.PKI) *Cluster {
	t.Helper()
	if n != 1 && n != 3 {
		t.Fatalf("etcdtest: Start: n = %d, want 1 or 3", n)
	}
	// One base directory, created before the Cleanup below is registered,
	// so that it is removed only after the members have stopped (Cleanup
	// runs last-registered first).
	base := t.TempDir()
	c := &Cluster{}
	t.Cleanup(c.stopAll)

	var lastErr error
	for attempt := 1; attempt <= etcdStartAttempts; attempt++ {
		err := c.start(base, attempt, n, pki)
		if err == nil {
			c.LeaderIndex(t)
			return c
		}
		lastErr = err
		if !etcdAddrInUse(err) {
			break
		}
		t.Logf("etcdtest: Start attempt %d: %v; retrying on fresh ports", attempt, err)
	}
	t.Fatalf("etcdtest: Start(%d): %v", n, lastErr)
	return nil
}

// start reserves ports, starts the n members one after the other and waits
// until each is ready. On failure it stops what it started.
func (c *Cluster) start(base string, attempt, n int, pki *etcdtlstest.PKI) error {
	ports, release, err := etcdReservePorts(2 * n)
	if err != nil {
		return err
	}
	members := make([]*etcdMember, n)
	peers := make([]string, n)
	for i := range members {
		m := &etcdMember{
			tls:       pki,
			name:      fmt.Sprintf("m%d", i),
			dir:       filepath.Join(base, fmt.Sprintf("try%d-m%d", attempt, i)),
			clientURL: etcdLoopbackURL(ports[2*i]),
			peerURL:   etcdLoopbackURL(ports[2*i+1]),
		}
		if pki != nil {
			m.clientURL.Scheme = "https"
		}
		members[i] = m
		peers[i] = m.name + "=" + m.peerURL.String()
	}
	initialCluster := strings.Join(peers, ",")

	// A new member first asks the other members' peer URLs whether it was
	// bootstrapped already (etcdserver/bootstrap.go), with a 1 s timeout. A
	// port that accepts connections but does not answer costs that second:
	// a port still held by the reservation, or a member started concurrently
	// whose peer listener is open but not served yet. So: release every
	// port first, then start the members one after the other; embed.StartEtcd
	// returns without waiting for the peers (ReadyNotify does), and a member
	// it returns serves its peer URL, so every peer asked either answers or
	// refuses the connection.
	release()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for _, m := range members {
		if err = m.start(initialCluster, embed.ClusterStateFlagNew); err != nil {
			break
		}
	}
	if err == nil {
		for i, m := range members {
			wg.Go(func() { errs[i] = m.waitReady() })
		}
		wg.Wait()
		err = errors.Join(errs...)
	}
	if err != nil {
		for _, m := range members {
			wg.Go(func() { m.stop(true) })
		}
		wg.Wait()
		return err
	}
	c.mu.Lock()
	c.members = members
	c.mu.Unlock()
	return nil
}

// start starts the member's etcd (m.etcd is nil) without waiting for it to
// be ready.
func (m *etcdMember) start(initialCluster, state string) error {
	stopping := make(chan struct{})
	e, err := etcdlocal.StartMember(m.config(initialCluster, state, stopping))
	if err != nil {
		return err
	}
	m.etcd, m.stopping = e, stopping
	return nil
}

// stop stops the member's etcd, if it runs. A clean stop (kill false) is
// etcd's own graceful shutdown, which hands raft leadership to another
// member first. kill stops raft at once (EtcdServer.HardStop), so the other
// members notice only when heartbeats stop, as after a crash.
//
// Either way the member's client streams (watches, lease keep-alives) are
// cut at once: embed's Close otherwise waits up to etcd's request timeout
// (7 s) for them to end before it cuts them itself.
func (m *etcdMember) stop(kill bool) {
	e := m.etcd
	if e == nil {
		return
	}
	m.etcd = nil
	close(m.stopping)
	if kill {
		e.Server.HardStop()
	}
	e.Close()
}

// config describes the member for etcdlocal, the one launcher of embedded
// members.
func (m *etcdMember) config(initialCluster, state string, stopping <-chan struct{}) etcdlocal.Member {
	em := etcdlocal.Member{
		Name: m.name, Dir: m.dir, ClientURL: m.clientURL, PeerURL: m.peerURL,
		InitialCluster: initialCluster, Token: "testenv", State: state,
		Logger:  etcdLogger(m.name),
		NoFsync: true,
		// bcrypt's minimum cost for the users' passwords: a login then costs
		// the member about a millisecond instead of about 100 ms, which tests
		// that run many processes on two cores cannot spare (what a login
		// costs is counted, not timed: TestKeepAlivesShareOneStreamAndOneLogin).
		BcryptCost:  etcdBcryptCost,
		GRPCOptions: []grpc.ServerOption{grpc.ChainStreamInterceptor(etcdCutStreams(stopping))},
	}
	if m.tls != nil {
		em.TLS = &transport.TLSInfo{
			CertFile: m.tls.ServerCert, KeyFile: m.tls.ServerKey,
			TrustedCAFile: m.tls.CA, ClientCertAuth: true,
		}
	}
	return em
}

// etcdCutStreams returns a gRPC stream interceptor that ends the member's
// streams when stopping is closed, with codes.Unavailable, which clientv3
// treats as "try another endpoint" (as it does when a connection drops).
// It runs innermost, after etcd's own interceptors.
func etcdCutStreams(stopping <-chan struct{}) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		go func() {
			select {
			case <-stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := handler(srv, etcdServerStream{ServerStream: ss, ctx: ctx})
		select {
		case <-stopping:
			if ss.Context().Err() == nil {
				return status.Error(codes.Unavailable, "etcdtest: etcd member is stopping")
			}
		default:
		}
		return err
	}
}

type etcdServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s etcdServerStream) Context() context.Context { return s.ctx }

// etcdLogger is the members' zap logger: errors only, to stderr, without the
// errors embed logs for every listener and server it closes on shutdown
// ("setting up serving from embedded etcd failed." with "http: Server
// closed", "mux: server closed", "use of closed network connection"), which
// would otherwise bury real errors.
func etcdLogger(name string) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), zapcore.ErrorLevel)
	return zap.New(etcdQuietClose{core}).Named("etcdtest." + name)
}

type etcdQuietClose struct{ zapcore.Core }

func (c etcdQuietClose) With(fields []zapcore.Field) zapcore.Core {
	return etcdQuietClose{c.Core.With(fields)}
}

func (c etcdQuietClose) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c etcdQuietClose) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	if ent.Message == "setting up serving from embedded etcd failed." {
		for _, f := range fields {
			if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType && etcdClosedErr(err) {
				return nil
			}
		}
	}
	return c.Core.Write(ent, fields)
}

func etcdClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) ||
		errors.Is(err, grpc.ErrServerStopped) || strings.Contains(err.Error(), "mux: server closed")
}

// waitReady waits until the member serves client requests: it has joined
// the cluster and published itself, which takes a quorum.
func (m *etcdMember) waitReady() error {
	if err := etcdlocal.Ready(context.Background(), m.etcd, etcdReadyTimeout); err != nil {
		return fmt.Errorf("member %s (client %s): %w (a member becomes ready only once a quorum of the cluster runs)",
			m.name, m.clientURL.Host, err)
	}
	return nil
}

func (c *Cluster) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Kill rather than stop cleanly: a clean stop of the leader waits up to
	// 7 s to hand leadership to a member that is stopping too.
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Go(func() { m.stop(true) })
	}
	wg.Wait()
}

// Endpoints returns the client URLs of all members, running or not, in
// index order.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i := range c.members {
		eps[i] = c.Endpoint(i)
	}
	return eps
}

// Endpoint returns the client URL of member i ("http://127.0.0.1:port", or
// https for a cluster of StartSecure).
func (c *Cluster) Endpoint(i int) string {
	return c.member(i).clientURL.String()
}

// Size returns the number of members.
func (c *Cluster) Size() int { return len(c.members) }

func (c *Cluster) member(i int) *etcdMember {
	if i < 0 || i >= len(c.members) {
		panic(fmt.Sprintf("etcdtest: etcd member %d does not exist (the cluster has %d)", i, len(c.members)))
	}
	return c.members[i]
}

// Client returns a clientv3 client on the given endpoints, or on all
// members' client URLs when none are given; on a cluster of
// StartSecure it presents the test's client certificate and logs in as
// root. It is closed at t.Cleanup; closing it earlier (to simulate a crashed
// process) is harmless.
func (c *Cluster) Client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	if c.secure == nil {
		return c.client(t, endpoints, "", "")
	}
	return c.client(t, endpoints, "root", c.secure.Auth.RootPassword)
}

// UserClient is Client logged in as snip-jobs' user (only its prefix).
func (c *Cluster) UserClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if c.secure == nil {
		t.Fatal("etcdtest: UserClient: the cluster has no authentication (use StartSecure)")
	}
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	return c.client(t, endpoints, c.secure.Auth.User, c.secure.Auth.Password)
}

func (c *Cluster) client(t testing.TB, endpoints []string, user, password string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: etcdDialTimeout,
		Logger:      zap.NewNop(),
		Username:    user,
		Password:    password,
	}
	if pki := c.member(0).tls; pki != nil {
		tc, err := transport.TLSInfo{CertFile: pki.ClientCert, KeyFile: pki.ClientKey, TrustedCAFile: pki.CA}.ClientConfig()
		if err != nil {
			t.Fatalf("etcdtest: etcd client TLS: %v", err)
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcdtest: etcd client on %v: %v", endpoints, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Stop stops member i cleanly, as a real etcd process does on SIGTERM
// (embed's Etcd.Close); its data directory and ports are kept for Restart.
// Stopping the raft leader makes it hand leadership to another member first,
// so the cluster has a leader again at once. In-flight unary requests are
// let finish; client streams (watches, lease keep-alives) are cut at once
// with codes.Unavailable, and clients move to another endpoint.
func (c *Cluster) Stop(t testing.TB, i int) {
	t.Helper()
	c.stop(t, "Stop", i, false)
}

// Kill stops member i like a crash: raft stops at once, without handing
// leadership over, so when it was the leader the other members elect a new
// one only after the election timeout (1 s). Connections to it are closed,
// as the kernel does for a killed process. Restart brings it back.
func (c *Cluster) Kill(t testing.TB, i int) {
	t.Helper()
	c.stop(t, "Kill", i, true)
}

func (c *Cluster) stop(t testing.TB, op string, i int, kill bool) {
	t.Helper()
	m := c.member(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.etcd == nil {
		t.Fatalf("etcdtest: %s: etcd member %s is not running", op, m.name)
	}
	m.stop(kill)
}

// Restart starts the stopped member i again with the same name, data
// directory and ports, and waits until it is ready. The member rejoins with
// the identity stored in its data directory. Ready means it has published
// itself through raft, so a quorum must be running with it: restarting one
// member of a 3-member cluster whose other two are stopped fails after a
// bound.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	m := c.member(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.etcd != nil {
		t.Fatalf("etcdtest: Restart: etcd member %s is running", m.name)
	}
	peers := make([]string, len(c.members))
	for j, o := range c.members {
		peers[j] = o.name + "=" + o.peerURL.String()
	}
	// With a data directory the member boots from its WAL and ignores
	// InitialCluster and ClusterState; "existing" says what this is.
	if err := m.start(strings.Join(peers, ","), embed.ClusterStateFlagExisting); err != nil {
		t.Fatalf("etcdtest: Restart: %v", err)
	}
	if err := m.waitReady(); err != nil {
		m.stop(true)
		t.Fatalf("etcdtest: Restart: %v", err)
	}
}

// Running reports whether member i is running (started and not stopped).
func (c *Cluster) Running(i int) bool {
	m := c.member(i)
	c.mu.Lock()
	defer c.mu.Unlock()
	return m.etcd != nil
}

// LeaderIndex waits until every running member names the same raft leader
// and that leader is a running member, and returns the leader's index. It
// fails the test when that does not happen within a bound, for instance
// because no quorum is running.
func (c *Cluster) LeaderIndex(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(etcdLeaderTimeout)
	for {
		idx, state := c.leader()
		if idx >= 0 {
			return idx
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcdtest: LeaderIndex: the running etcd members do not agree on a leader after %v; last seen: %s",
				etcdLeaderTimeout, state)
		}
		time.Sleep(etcdPollInterval)
	}
}

// leader returns the index of the leader all running members agree on, or
// -1 and a description of what each member sees.
func (c *Cluster) leader() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var (
		seen   []string
		lead   uint64
		agreed = true
		byID   = map[uint64]int{}
	)
	for i, m := range c.members {
		if m.etcd == nil {
			seen = append(seen, m.name+": stopped")
			continue
		}
		s := m.etcd.Server
		byID[uint64(s.MemberID())] = i
		l := s.Lead()
		seen = append(seen, fmt.Sprintf("%s (id %s): leader %x", m.name, s.MemberID(), l))
		if l == 0 || (lead != 0 && l != lead) {
			agreed = false
		}
		lead = l
	}
	idx, ok := byID[lead]
	if !agreed || !ok {
		return -1, strings.Join(seen, "; ")
	}
	return idx, ""
}

// Proxy is the fault proxy (testbench/faultproxy) in front of one member's
// client URL. It forwards raw bytes per connection, so its faults apply to
// connections that are already open as well as to new ones.
type Proxy struct {
	p        *faultproxy.Proxy
	endpoint string
}

// Proxy starts a fault proxy on a free 127.0.0.1 port that forwards to member
// i's client URL, and closes it (and its connections) at t.Cleanup. The member
// does not have to be running; while it is stopped, the proxy closes the
// connections it cannot forward.
func (c *Cluster) Proxy(t testing.TB, i int) *Proxy {
	t.Helper()
	to := c.member(i).clientURL
	p, err := faultproxy.New(to.Host) // bytes only: TLS goes through it end to end
	if err != nil {
		t.Fatalf("etcdtest: Proxy to etcd member %d (%s): %v", i, to.Host, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	from := url.URL{Scheme: to.Scheme, Host: p.Addr()} // the client speaks to the member through it
	return &Proxy{p: p, endpoint: from.String()}
}

// Endpoint returns the proxy's URL ("http://127.0.0.1:port", https in front
// of a member of StartSecure), usable as a clientv3 endpoint.
func (p *Proxy) Endpoint() string { return p.endpoint }

// Blackhole cuts the link both ways, on open connections as well as new
// ones, until Unblackhole: a network partition. Bytes are held, not lost, and
// delivered in order once it heals, as TCP's retransmissions do; connections
// stay open unless an end gives up on its own.
func (p *Proxy) Blackhole() { p.p.Partition(true) }

// Unblackhole heals the link.
func (p *Proxy) Unblackhole() { p.p.Partition(false) }

// Delay holds every chunk of data read from now on d before forwarding it,
// in each direction, so a request/response round trip takes at least 2d
// longer; chunks already on their way keep the delay they were read with.
// A d of zero or less removes the delay.
func (p *Proxy) Delay(d time.Duration) { p.p.SetDelay(d) }

// Undelay removes the delay.
func (p *Proxy) Undelay() { p.p.SetDelay(0) }

// etcdReservePorts finds n distinct free TCP ports on 127.0.0.1 below the
// kernel's ephemeral range: a member keeps its ports across Stop and Restart,
// and a port in that range may meanwhile become the source port of any
// outgoing connection (a PostgreSQL pool's, another test binary's), which
// would hold it for as long as it lives. The listeners stay open, so the
// ports stay taken, until release is called; the caller releases them as
// late as possible.
func etcdReservePorts(n int) (ports []int, release func(), err error) {
	lns := make([]net.Listener, 0, n)
	release = func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	for range n {
		ln, err := freeport.Listen()
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("reserve a free port on 127.0.0.1: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, release, nil
}

func etcdLoopbackURL(port int) url.URL {
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// etcdAddrInUse reports whether err comes from binding a port that another
// socket took between the reservation and the bind.
func etcdAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}
