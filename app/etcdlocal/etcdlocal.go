// Package etcdlocal starts an embedded single-member etcd inside the process: the
// default of `snip-jobs run` when the config names no etcd endpoints, and the
// etcd of a development setup.
//
// What is guaranteed: Start returns only once the member serves client requests
// on its loopback client URL (or with an error, after at most ReadyTimeout);
// Close stops it and releases its data directory, whose contents (keys, leases,
// revisions) survive a restart. Client and peer listeners bind 127.0.0.1 only.
// Auto-compaction keeps one hour of history, so a long-running member does not
// grow without bound.
//
// What is NOT provided: any fault tolerance. One member is one point of failure,
// and several processes that each start their own embedded etcd share nothing:
// each would elect itself leader of every job. Embedded etcd is for a single
// instance, or for several instances on one machine that all use the one member
// (pointing the others at Endpoint). Three servers need a real three-member
// cluster.
//
// Member, StartMember and Ready are the project's one launcher of embedded
// members, Start's and the test bench's (testbench/etcdtest's clusters in the
// test process, testbench/chaos's member processes): one place that turns a
// member's name, URLs, cluster and options into etcd's configuration.
package etcdlocal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
)

// Defaults for Config.
const (
	DefaultClientAddr   = "127.0.0.1:2379"
	DefaultReadyTimeout = 60 * time.Second
	DefaultName         = "snip-jobs"
)

// Config configures an embedded member. Zero fields take the defaults noted.
type Config struct {
	// Dir is the data directory, created if absent (mode 0700). Required.
	Dir string
	// ClientAddr is host:port of the client listener (default 127.0.0.1:2379).
	// Port 0 picks a free port; Endpoint says which. The host must be a loopback
	// address.
	ClientAddr string
	// PeerAddr is host:port of the peer listener, which no one uses in a
	// single-member cluster but etcd requires (default 127.0.0.1:0, a free port).
	PeerAddr string
	// Name of the member (default "snip-jobs").
	Name string
	// ReadyTimeout bounds the wait until the member serves requests (default 60 s:
	// replaying a large write-ahead log takes a while).
	ReadyTimeout time.Duration
	// Log receives etcd's own errors (and warnings when it is enabled at debug
	// level); default: discard.
	Log *slog.Logger
}

// Server is a running embedded member.
type Server struct {
	e        *embed.Etcd
	endpoint string
	dir      string
}

// Start starts the member and waits until it is ready, ctx is done, or
// ReadyTimeout passes.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("etcdlocal: Dir is required")
	}
	if cfg.ClientAddr == "" {
		cfg.ClientAddr = DefaultClientAddr
	}
	if cfg.PeerAddr == "" {
		cfg.PeerAddr = "127.0.0.1:0"
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdlocal: data directory: %w", err)
	}
	// A free port is only free until someone binds it: with port 0, try again
	// on fresh ports if another process took one in between.
	var (
		e      *embed.Etcd
		client url.URL
		err    error
	)
	for attempt := 1; ; attempt++ {
		e, client, err = start(ctx, cfg)
		if err == nil || !addrInUse(err) || attempt == 3 || !freePorts(cfg) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	s := &Server{e: e, endpoint: client.String(), dir: cfg.Dir}
	if err := Ready(ctx, e, cfg.ReadyTimeout); err != nil {
		s.Close()
		return nil, fmt.Errorf("etcdlocal: etcd in %s: %w", cfg.Dir, err)
	}
	return s, nil
}

// freePorts reports whether cfg asks for any free port (port 0).
func freePorts(cfg Config) bool {
	for _, a := range []string{cfg.ClientAddr, cfg.PeerAddr} {
		if _, port, err := net.SplitHostPort(a); err == nil && port == "0" {
			return true
		}
	}
	return false
}

// start starts the member without waiting for it to be ready.
func start(ctx context.Context, cfg Config) (*embed.Etcd, url.URL, error) {
	client, err := loopbackURL("client", cfg.ClientAddr)
	if err != nil {
		return nil, client, err
	}
	peer, err := loopbackURL("peer", cfg.PeerAddr)
	if err != nil {
		return nil, client, err
	}
	minLevel := zapcore.ErrorLevel
	if cfg.Log.Enabled(ctx, slog.LevelDebug) {
		minLevel = zapcore.WarnLevel
	}
	m := Member{
		Name: cfg.Name, Dir: cfg.Dir, ClientURL: client, PeerURL: peer, Token: "snip-jobs-embedded",
		AutoCompaction: "1h",
		LogLevel:       minLevel.String(),
		Logger:         ZapLogger(cfg.Log.With("component", "embedded-etcd"), minLevel),
	}
	e, err := embed.StartEtcd(m.Config())
	switch {
	case addrInUse(err):
		return nil, client, fmt.Errorf("etcdlocal: start etcd on %s (peer %s): %w (is another snip-jobs or etcd already running on this host?)",
			client.Host, peer.Host, err)
	case err != nil:
		return nil, client, fmt.Errorf("etcdlocal: start etcd (client %s, data %s): %w", client.Host, cfg.Dir, err)
	}
	return e, client, nil
}

// Endpoint is the member's client URL, e.g. "http://127.0.0.1:2379".
func (s *Server) Endpoint() string { return s.endpoint }

// Dir is the member's data directory.
func (s *Server) Dir() string { return s.dir }

// Err reports a fatal error of the running member (the channel is closed when
// it stops).
func (s *Server) Err() <-chan error { return s.e.Err() }

// Close stops the member cleanly and waits until it has stopped. Client
// streams still open (watches, keep-alives) are cut after etcd's request
// timeout; close clients first.
func (s *Server) Close() {
	s.e.Close()
}

// loopbackURL turns host:port into an http URL, refusing non-loopback hosts and
// resolving port 0 to a free port (etcd advertises the URL it listens on, so it
// must be the real one).
func loopbackURL(what, addr string) (url.URL, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return url.URL{}, fmt.Errorf("etcdlocal: %s address %q: %w", what, addr, err)
	}
	ip := net.ParseIP(host)
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
		host = ip.String()
	}
	if ip == nil || !ip.IsLoopback() {
		return url.URL{}, fmt.Errorf("etcdlocal: %s address %q: the embedded etcd listens on loopback addresses only", what, addr)
	}
	if port == "0" {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return url.URL{}, fmt.Errorf("etcdlocal: find a free %s port: %w", what, err)
		}
		port = strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	return url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}, nil
}

// addrInUse reports whether err comes from binding a port that is taken.
func addrInUse(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use"))
}
