package etcdlocal

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Member is one embedded etcd member of a cluster whose members all listen on
// loopback: the one description from which this package's Start, the tests'
// clusters (testbench/etcdtest) and the fault harness's member processes
// (testbench/chaos) start etcd. Zero fields take etcd's defaults unless noted.
type Member struct {
	Name      string
	Dir       string
	ClientURL url.URL // http, or https with TLS
	PeerURL   url.URL
	// InitialCluster is name=peerURL,... of every member (default: this one
	// alone); Token is the initial cluster token.
	InitialCluster string
	Token          string
	// State is embed.ClusterStateFlagNew (default) or ...Existing.
	State string
	// TLS, if set, is the server's certificate and the CA whose client
	// certificates it requires.
	TLS *transport.TLSInfo
	// NoFsync skips fsync: for members whose process may die but whose
	// machine does not crash (tests, the fault harness).
	NoFsync bool
	// BcryptCost is the cost of hashing users' passwords (0: etcd's).
	BcryptCost uint
	// AutoCompaction, if set, is the periodic compaction's retention.
	AutoCompaction string
	// LogLevel is etcd's (default "error"); Logger, if set, receives its log.
	LogLevel string
	Logger   *zap.Logger
	// GRPCOptions are added to the client gRPC server's options.
	GRPCOptions []grpc.ServerOption
}

// Config is the member's embed.Config, fresh on every call: embed.StartEtcd
// keeps state (the logger) in the Config it is given.
func (m Member) Config() *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.Dir
	cfg.ListenClientUrls = []url.URL{m.ClientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.ClientURL}
	cfg.ListenPeerUrls = []url.URL{m.PeerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.PeerURL}
	cfg.ListenMetricsUrls = nil
	cfg.InitialCluster = m.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = m.Name + "=" + m.PeerURL.String()
	}
	cfg.InitialClusterToken = m.Token
	cfg.ClusterState = embed.ClusterStateFlagNew
	if m.State != "" {
		cfg.ClusterState = m.State
	}
	if m.TLS != nil {
		cfg.ClientTLSInfo = *m.TLS
	}
	cfg.UnsafeNoFsync = m.NoFsync
	if m.BcryptCost != 0 {
		cfg.BcryptCost = m.BcryptCost
	}
	if m.AutoCompaction != "" {
		cfg.AutoCompactionMode = embed.CompactorModePeriodic
		cfg.AutoCompactionRetention = m.AutoCompaction
	}
	cfg.LogLevel = "error"
	if m.LogLevel != "" {
		cfg.LogLevel = m.LogLevel
	}
	if m.Logger != nil {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(m.Logger)
	}
	cfg.GRPCAdditionalServerOptions = m.GRPCOptions
	return cfg
}

// StartMember starts the member without waiting for it to be ready (a member
// of several is ready only once a quorum runs: see Ready). The error names
// the member, its ports and its data directory.
func StartMember(m Member) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(m.Config())
	if err != nil {
		return nil, fmt.Errorf("start etcd member %s (client %s, peer %s, dir %s): %w",
			m.Name, m.ClientURL.Host, m.PeerURL.Host, m.Dir, err)
	}
	return e, nil
}

// Ready waits until e serves client requests (it has joined its cluster and
// published itself, which takes a quorum), fails or stops, ctx ends, or
// timeout passes. It does not stop e.
func Ready(ctx context.Context, e *embed.Etcd, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err, ok := <-e.Err():
		if !ok {
			err = errors.New("stopped")
		}
		return fmt.Errorf("failed before it was ready: %w", err)
	case <-e.Server.StopNotify():
		return errors.New("stopped before it was ready")
	case <-ctx.Done():
		return fmt.Errorf("waiting until it is ready: %w", ctx.Err())
	case <-timer.C:
		return fmt.Errorf("not ready after %v", timeout)
	}
}
