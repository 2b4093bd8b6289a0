package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/snip/snip-jobs/app/etcdlocal"
	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/testbench/childproc"
	"github.com/snip/snip-jobs/testbench/etcdtlstest"
)

// MemberCommand is the first argument that makes a binary embedding this
// package run one etcd member (MemberMain) instead of its usual work: the
// harness starts each member by running its own executable again with it.
const MemberCommand = "etcd-member"

// memberReady is the line a member process prints on stdout once it serves
// client requests; nativeReady is in the line an etcd server binary logs on
// stderr then (3.5 and 3.6: embed/serve.go, after ReadyNotify).
const (
	memberReady = "etcd-member: ready"
	nativeReady = `"msg":"ready to serve client requests"`
)

// Bounds for etcd members. Generous: they decide how long a broken setup takes
// to fail, not whether a working one passes.
const (
	memberReadyTimeout = 60 * time.Second
	etcdOpTimeout      = 3 * time.Second
)

// bcryptCost is the members' cost of hashing the users' passwords: bcrypt's
// minimum, so that a login costs a member about a millisecond instead of about
// 100 ms on two cores shared by ten processes. (Logins happen when a client
// opens a gRPC stream; their count, not their time, is what snip-jobs
// controls: see leadership's keep-alive stream.)
const bcryptCost = 4

// How long a member process tries to bind its ports.
const (
	bindAttempts = 20
	bindRetry    = 250 * time.Millisecond
)

// MemberMain runs one etcd member in this process until SIGTERM or SIGKILL:
// `<binary> etcd-member --name m0 --dir D --client URL --peer URL
// --initial-cluster m0=URL,... --state new|existing`. It prints memberReady on
// stdout once the member serves client requests, and returns the exit status.
// Data is not fsynced (the machine does not crash in these runs; the processes
// do, and the kernel keeps their writes).
func MemberMain(args []string) int {
	fs := flag.NewFlagSet(MemberCommand, flag.ContinueOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("dir", "", "data directory")
	client := fs.String("client", "", "client URL (http://127.0.0.1:port)")
	peer := fs.String("peer", "", "peer URL (http://127.0.0.1:port)")
	initial := fs.String("initial-cluster", "", "name=peerURL,...")
	state := fs.String("state", embed.ClusterStateFlagNew, "new or existing")
	cert := fs.String("cert", "", "server certificate (PEM); with it, clients must present a certificate signed by --ca")
	key := fs.String("key", "", "server key (PEM)")
	ca := fs.String("ca", "", "CA of the client certificates (PEM)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cu, err := url.Parse(*client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-member: client URL:", err)
		return 2
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-member: peer URL:", err)
		return 2
	}
	m := etcdlocal.Member{
		Name: *name, Dir: *dir, ClientURL: *cu, PeerURL: *pu,
		InitialCluster: *initial, Token: "snip-chaos", State: *state,
		NoFsync: true, BcryptCost: bcryptCost,
	}
	if *cert != "" {
		m.TLS = &transport.TLSInfo{CertFile: *cert, KeyFile: *key, TrustedCAFile: *ca, ClientCertAuth: true}
	}
	// A restarted member binds the ports it had: while it was down, another
	// process's outgoing connection may have been given one of them as its
	// ephemeral port. Such connections are short-lived here, so try again
	// for a while (StartEtcd binds before it touches the data directory).
	var e *embed.Etcd
	for attempt := 1; ; attempt++ {
		var err error
		if e, err = etcdlocal.StartMember(m); err == nil {
			break
		}
		if attempt == bindAttempts || !strings.Contains(err.Error(), "address already in use") {
			fmt.Fprintln(os.Stderr, "etcd-member: start:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "etcd-member: start: %v; trying again (%d of %d)\n", err, attempt, bindAttempts)
		time.Sleep(bindRetry)
	}
	sigs := make(chan os.Signal, 1)
	signalNotify(sigs)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println(memberReady)
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd-member: failed before ready:", err)
		return 1
	case <-sigs:
		e.Close()
		return 0
	}
	select {
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd-member:", err)
		return 1
	case <-sigs:
		e.Close()
		return 0
	}
}

// etcdMember is one member process, as the harness sees it. Its name, ports
// and data directory survive restarts.
type etcdMember struct {
	name       string
	dir        string
	clientURL  string
	peerURL    string
	logPath    string
	executable string
	native     bool     // executable is an etcd server binary, not MemberMain
	args       []string // the fixed flags (after MemberCommand for MemberMain)

	mu   sync.Mutex
	proc *childproc.Proc
}

// etcdCluster is three member processes, serving clients over TLS only
// (client certificates required) with authentication on.
type etcdCluster struct {
	members []*etcdMember
	pki     *etcdtlstest.PKI
	auth    etcdtlstest.Auth
	cli     *clientv3.Client // as root, on every member's client URL directly (not through a proxy)
}

// startEtcd starts an n-member cluster on free ports. etcd binds its ports
// itself (it takes no passed sockets), so another process can take a port
// between the pick and the bind. A member process waits a few seconds for a
// taken port (MemberMain); if that is not enough, the cluster is started
// again on new ports (twice at most), the failed attempt's logs kept beside.
func startEtcd(ctx context.Context, executable string, native bool, dir string, n int) (*etcdCluster, error) {
	pki, err := etcdtlstest.NewPKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c, err := startEtcdOnce(ctx, executable, native, dir, n, pki)
		if err == nil {
			return c, nil
		}
		if attempt == 3 || c == nil || !lostAPort(c) {
			return nil, err
		}
		for _, m := range c.members {
			_ = os.RemoveAll(m.dir)
			_ = os.Rename(m.logPath, fmt.Sprintf("%s.attempt%d", m.logPath, attempt))
		}
	}
}

// lostAPort reports whether a member of c failed to start because its port
// was taken.
func lostAPort(c *etcdCluster) bool {
	for _, m := range c.members {
		if b, err := os.ReadFile(m.logPath); err == nil && strings.Contains(string(b), "address already in use") {
			return true
		}
	}
	return false
}

func startEtcdOnce(ctx context.Context, executable string, native bool, dir string, n int, pki *etcdtlstest.PKI) (*etcdCluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &etcdCluster{pki: pki, auth: etcdtlstest.NewAuth(Prefix)}
	var peers []string
	for i := range n {
		m := &etcdMember{
			name:       fmt.Sprintf("m%d", i),
			dir:        filepath.Join(dir, fmt.Sprintf("etcd-m%d", i)),
			clientURL:  fmt.Sprintf("https://127.0.0.1:%d", ports[2*i]),
			peerURL:    fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			logPath:    filepath.Join(dir, fmt.Sprintf("etcd-m%d.log", i)),
			executable: executable,
			native:     native,
		}
		c.members = append(c.members, m)
		peers = append(peers, m.name+"="+m.peerURL)
	}
	initial := strings.Join(peers, ",")
	for _, m := range c.members {
		m.args = memberArgs(m, initial, pki)
	}
	if err := c.startMembers(ctx, embed.ClusterStateFlagNew, c.members...); err != nil {
		c.close()
		return c, err // closed: for lostAPort
	}
	// Authentication on, as docs/operations.md says; the harness is root.
	admin, err := c.client("", "")
	if err == nil {
		gctx, cancel := context.WithTimeout(ctx, memberReadyTimeout)
		err = etcdtlstest.Grant(gctx, admin, c.auth)
		cancel()
		admin.Close()
	}
	if err == nil {
		c.cli, err = c.client("root", c.auth.RootPassword)
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return c, nil
}

// memberArgs is the member's command line without --state (MemberMain's
// flags, or an etcd server binary's).
func memberArgs(m *etcdMember, initial string, pki *etcdtlstest.PKI) []string {
	if !m.native {
		return []string{"--name", m.name, "--dir", m.dir, "--client", m.clientURL, "--peer", m.peerURL, "--initial-cluster", initial,
			"--cert", pki.ServerCert, "--key", pki.ServerKey, "--ca", pki.CA}
	}
	return []string{"--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", m.clientURL, "--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", initial, "--initial-cluster-token", "snip-chaos",
		"--cert-file", pki.ServerCert, "--key-file", pki.ServerKey, "--trusted-ca-file", pki.CA, "--client-cert-auth",
		"--unsafe-no-fsync", "--log-level", "info", "--bcrypt-cost", strconv.Itoa(bcryptCost)}
}

// client is a client on every member's client URL, over TLS with the
// harness's client certificate, logged in as user (none when empty).
func (c *etcdCluster) client(user, password string) (*clientv3.Client, error) {
	tc, err := transport.TLSInfo{CertFile: c.pki.ClientCert, KeyFile: c.pki.ClientKey, TrustedCAFile: c.pki.CA}.ClientConfig()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: tc, Username: user, Password: password})
}

// startMembers starts the given stopped members at once and waits until each
// is ready (which takes a quorum).
func (c *etcdCluster) startMembers(ctx context.Context, state string, ms ...*etcdMember) error {
	ready := make([]<-chan error, len(ms))
	for i, m := range ms {
		ch, err := m.start(state)
		if err != nil {
			return err
		}
		ready[i] = ch
	}
	var errs []error
	for i, ch := range ready {
		select {
		case err := <-ch:
			if err != nil {
				errs = append(errs, fmt.Errorf("etcd member %s: %w", ms[i].name, err))
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(memberReadyTimeout):
			errs = append(errs, fmt.Errorf("etcd member %s not ready within %v (see %s)", ms[i].name, memberReadyTimeout, ms[i].logPath))
		}
	}
	return errors.Join(errs...)
}

// start runs the member process; the channel gets nil once it is ready, or
// the reason it will not be.
func (m *etcdMember) start(state string) (<-chan error, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		return nil, fmt.Errorf("etcd member %s is running", m.name)
	}
	args := append(append([]string{MemberCommand}, m.args...), "--state", state)
	readyLine := func(line string) bool { return line == memberReady }
	if m.native {
		args = append(slices.Clone(m.args), "--initial-cluster-state", state)
		readyLine = func(line string) bool { return strings.Contains(line, nativeReady) }
	}
	ready := make(chan error, 1)
	var said atomic.Bool
	watch := childproc.Lines(func(line string) {
		if readyLine(line) && !said.Swap(true) {
			ready <- nil
		}
	})
	spec := childproc.Spec{Path: m.executable, Args: args, Log: m.logPath, Stdout: watch}
	if m.native { // it logs to stderr, the ready line among the rest
		spec.Stdout, spec.Stderr = nil, watch
	}
	// If the harness dies, its members die with it (childproc's pdeathsig).
	proc, err := childproc.Start(spec)
	if err != nil {
		return nil, fmt.Errorf("etcd member %s: %w", m.name, err)
	}
	m.proc = proc
	go func() {
		<-proc.Done()
		if !said.Swap(true) {
			ready <- fmt.Errorf("exited before it was ready: %v (see %s)", proc.Err(), m.logPath)
		}
	}()
	return ready, nil
}

// kill SIGKILLs the member process and waits for it to exit.
func (m *etcdMember) kill() {
	m.mu.Lock()
	p := m.proc
	m.proc = nil
	m.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

func (m *etcdMember) running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc != nil
}

// leader returns the index of the member every running member names as raft
// leader, or -1.
func (c *etcdCluster) leader(ctx context.Context) int {
	var lead uint64
	byID := map[uint64]int{}
	for i, m := range c.members {
		if !m.running() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
		st, err := c.cli.Status(sctx, m.clientURL)
		cancel()
		if err != nil || st.Leader == 0 || (lead != 0 && st.Leader != lead) {
			return -1
		}
		lead = st.Leader
		byID[st.Header.MemberId] = i
	}
	if i, ok := byID[lead]; ok {
		return i
	}
	return -1
}

// waitStepDown watches the raft leader m, alone since its followers died,
// until it no longer leads (it answers no Status, or names no leader or
// another one) and returns when it first saw that; zero if until fires
// first. Polled every 10 ms: the step-down is seen at most that late (plus a
// Status round trip), which only widens the bounds the checker derives from it.
func (c *etcdCluster) waitStepDown(ctx context.Context, m *etcdMember, until <-chan time.Time) time.Time {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
		st, err := c.cli.Status(sctx, m.clientURL)
		cancel()
		if err != nil || st.Leader != st.Header.MemberId {
			return time.Now()
		}
		select {
		case <-tick.C:
		case <-until:
			return time.Time{}
		case <-ctx.Done():
			return time.Time{}
		}
	}
}

// waitLeader waits until the running members agree on a running leader.
func (c *etcdCluster) waitLeader(ctx context.Context, bound time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		if i := c.leader(ctx); i >= 0 {
			return i, nil
		}
		if !sleep.For(ctx, 20*time.Millisecond) {
			return -1, fmt.Errorf("etcd members do not agree on a leader within %v", bound)
		}
	}
}

// version is the members' etcd server version (the first that answers).
func (c *etcdCluster) version(ctx context.Context) (string, error) {
	var errs []error
	for _, m := range c.members {
		sctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
		st, err := c.cli.Status(sctx, m.clientURL)
		cancel()
		if err == nil {
			return st.Version, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("etcd's version: %w", errors.Join(errs...))
}

func (c *etcdCluster) endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.clientURL)
	}
	return out
}

func (c *etcdCluster) close() {
	if c.cli != nil {
		_ = c.cli.Close()
	}
	for _, m := range c.members {
		m.kill()
	}
}
