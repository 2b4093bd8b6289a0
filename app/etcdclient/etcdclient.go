// Package etcdclient connects snip-jobs to etcd with the config's TLS files and
// user, and says plainly why it cannot.
//
// What is guaranteed: Probe asks each endpoint for its version over the same
// TLS settings the client uses; a failure is an *EndpointError naming the
// endpoint and the cause in words (wrong CA, a server certificate not for
// this host, our client certificate refused or expired, http:// against a
// TLS-only member); Connect's login names a wrong password the same way. Refused tells a
// server that answered and refused (waiting will not help) from one that does
// not answer. Connect waits while no endpoint answers, until its context ends,
// the same way with or without a user: clientv3.New logs in at once and gives
// up after DialTimeout, so Connect retries it instead of failing.
//
// What is NOT checked: that the user may write the key prefix (the first
// campaign or registration shows it), and certificates that change on disk
// after start (clientv3 reads them per handshake; a refusal then shows as
// failing keep-alives, not here).
package etcdclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/sleep"
)

// Config says how to reach etcd.
type Config struct {
	Endpoints   []string
	DialTimeout time.Duration
	// CA, Cert and Key are PEM files (etcd.tls). All empty: the system's roots
	// for https endpoints and no client certificate.
	CA, Cert, Key string
	// User and Password log in (etcd.auth); User empty: no login.
	User, Password string
	// Logger receives the etcd client's own log lines; nil: none.
	Logger *zap.Logger
}

// clientConfig is cfg as a clientv3.Config.
func (cfg Config) clientConfig() (clientv3.Config, error) {
	cc := clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               cfg.Logger,
		Username:             cfg.User,
		Password:             cfg.Password,
	}
	if cc.Logger == nil {
		cc.Logger = zap.NewNop()
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return cc, err
	}
	cc.TLS = tc
	return cc, nil
}

// tlsConfig is the client's TLS configuration: from the files when any is
// set, the system's roots when an endpoint is https, else none. The files
// are read through configs.ReadFile (regular files no larger than their kind
// may be, the key a secret no one else may write): the CA once, the client
// certificate and key now and again at each handshake, so that renewed ones
// are used without a restart (as etcd's own TLSInfo does).
func (cfg Config) tlsConfig() (*tls.Config, error) {
	if cfg.CA == "" && cfg.Cert == "" && cfg.Key == "" {
		for _, e := range cfg.Endpoints {
			if strings.HasPrefix(e, "https://") {
				return &tls.Config{MinVersion: tls.VersionTLS12}, nil
			}
		}
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CA != "" {
		pem, err := configs.ReadFile(configs.NamedFile{Key: "etcd.tls.ca", Path: cfg.CA, Holds: configs.Certificates})
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd TLS: etcd.tls.ca %s holds no PEM certificate", cfg.CA)
		}
	}
	if cfg.Cert != "" || cfg.Key != "" {
		if _, err := cfg.clientCertificate(); err != nil {
			return nil, err
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cfg.clientCertificate() }
	}
	return tc, nil
}

// clientCertificate reads etcd.tls.cert and etcd.tls.key.
func (cfg Config) clientCertificate() (*tls.Certificate, error) {
	cert, err := configs.ReadFile(configs.NamedFile{Key: "etcd.tls.cert", Path: cfg.Cert, Holds: configs.Certificates})
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	key, err := configs.ReadFile(configs.NamedFile{Key: "etcd.tls.key", Path: cfg.Key, Holds: configs.Secret})
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: etcd.tls.cert %s and etcd.tls.key %s: %w", cfg.Cert, cfg.Key, err)
	}
	return &pair, nil
}

// New returns a client on cfg's endpoints without probing them. With a user it
// logs in first, which fails after DialTimeout when no endpoint answers (use
// Connect to wait instead).
func New(cfg Config) (*clientv3.Client, error) {
	cc, err := cfg.clientConfig()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	return cli, nil
}

// retryEvery is Connect's pace while no endpoint answers.
const retryEvery = time.Second

// Connect probes the endpoints and returns a client once one can be made: at
// once without a user (clientv3 connects in the background, and keeps trying
// while etcd does not answer), and with a user once it has logged in. While
// no endpoint answers it calls waiting with the reason (on the first failed
// round and whenever the reason changes) and, with a user, probes again every
// second until ctx ends; once one answers, it logs in once, with as long as
// ctx leaves (a login is a bcrypt check and a raft round on the member:
// retrying a slow one every few seconds would only pile up abandoned ones).
// It returns at once, with the endpoints' errors, when the endpoints that
// answer all refuse us, or the login is refused.
func Connect(ctx context.Context, cfg Config, waiting func(error)) (*clientv3.Client, []Endpoint, error) {
	var said string
	for {
		eps := Probe(ctx, cfg)
		err := Usable(eps)
		switch {
		case refused(eps):
			return nil, eps, err
		case cfg.User == "":
			if err != nil && waiting != nil {
				waiting(err)
			}
			cli, nerr := New(cfg)
			return cli, eps, nerr
		case err == nil:
			cli, lerr := login(ctx, cfg)
			if lerr == nil {
				return cli, eps, nil
			}
			var ee *EndpointError
			if errors.As(lerr, &ee) && ee.Refused {
				return nil, eps, lerr
			}
			err = lerr // etcd went again, or the login did not finish in time
		}
		if msg := err.Error(); msg != said && waiting != nil {
			said = msg
			waiting(err)
		}
		if !sleep.For(ctx, retryEvery) {
			return nil, eps, fmt.Errorf("%w (still %v)", ctx.Err(), err)
		}
	}
}

// login makes a client that logs in, waiting for the login as long as ctx
// allows (clientv3 bounds it by DialTimeout, which is only used at creation).
func login(ctx context.Context, cfg Config) (*clientv3.Client, error) {
	if d, ok := ctx.Deadline(); ok {
		cfg.DialTimeout = max(cfg.DialTimeout, time.Until(d))
	}
	cli, err := New(cfg)
	if errors.Is(err, rpctypes.ErrAuthFailed) {
		return nil, &EndpointError{Endpoint: strings.Join(cfg.Endpoints, ", "), Refused: true,
			Cause: fmt.Sprintf("login as user %q refused: wrong user name or password (etcd.auth)", cfg.User), Err: rpctypes.ErrAuthFailed}
	}
	if err != nil {
		return nil, &EndpointError{Endpoint: strings.Join(cfg.Endpoints, ", "), Cause: "cannot log in", Err: err}
	}
	return cli, nil
}

// refused reports whether some endpoint answered and every endpoint that
// answered refused us.
func refused(eps []Endpoint) bool {
	any := false
	for _, e := range eps {
		var ee *EndpointError
		switch {
		case e.Err == nil:
			return false
		case errors.As(e.Err, &ee) && ee.Refused:
			any = true
		}
	}
	return any
}
