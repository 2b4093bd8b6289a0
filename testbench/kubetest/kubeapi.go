// Package kubetest runs a real kube-apiserver for tests: the release's own
// binary (Binary builds it into the cache once), over a real etcd (by
// default an embedded member of its own, package etcdlocal; or the caller's
// cluster, Options.Etcd, over TLS), serving HTTPS on a loopback port with
// self-signed certificates, token authentication and, by default,
// AlwaysAllow authorization.
//
// Shared is one server for a whole test binary (closed by
// benchtest.RunMain), Namespace a namespace of a test's own on it, and
// WaitLeases waits on a watch of a namespace's Leases.
//
// What is guaranteed: Start returns once /readyz answers ok; Config's
// clients verify the server's certificate; Stop and Start again keep the
// port, the certificates and etcd's data, so clients reconnect to the same
// server. What is NOT: isolation between tests sharing a server (use a
// namespace each), or any fault injection beyond stopping the process.
//
// Test-only: the production binary must not import it.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/snip/snip-jobs/app/etcdlocal"
	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/testbench/childproc"
	"github.com/snip/snip-jobs/testbench/freeport"
	"github.com/snip/snip-jobs/testbench/kubetest/kubebuild"
)

// ReadyBound bounds the wait for /readyz after a start.
const ReadyBound = 90 * time.Second

// Options configures Start. Zero fields take the defaults noted.
type Options struct {
	// Version of kube-apiserver (default kubebuild.Selected(): its
	// Version, or the release its VersionEnv names).
	Version string
	// Log receives etcd's errors; the apiserver's own output goes to
	// <dir>/kube-apiserver.log. Default: discard.
	Log *slog.Logger
	// ExtraTokens are more lines of the static token file
	// ("TOKEN,user,uid,group"), for clients with fewer rights.
	ExtraTokens []string
	// RBAC makes authorization RBAC (system:masters, the admin's group, may
	// still do anything) instead of AlwaysAllow.
	RBAC bool
	// NoBuild makes Start fail, saying how to build it, when the binary is
	// not in the cache yet, rather than build it (for snip-dev, whose user
	// did not ask for an hour's build).
	NoBuild bool
	// Etcd, if set, is the caller's etcd cluster, which the apiserver stores
	// its data in and which Close leaves running; nil: an embedded member of
	// the server's own, closed with it.
	Etcd *Etcd
}

// Etcd is an etcd cluster for the apiserver (--etcd-servers), over TLS
// with a client certificate.
type Etcd struct {
	// Servers are the members' client URLs (https://127.0.0.1:port).
	Servers []string
	// CAFile verifies the members' certificate; CertFile and KeyFile are the
	// apiserver's client certificate. kube-apiserver cannot log in to etcd
	// with a user name and a password: with etcd's authentication on, the
	// certificate's common name must name an etcd user
	// (etcdtlstest.PKI.CertUser, etcdtlstest.AddCertUser). Its role must be
	// root: the apiserver compacts etcd (an administrator's RPC) and keeps
	// the compaction's revision in compact_rev_key, outside its prefix.
	CAFile, CertFile, KeyFile string
	// Prefix is the apiserver's key prefix (--etcd-prefix; default its own,
	// /registry).
	Prefix string
}

// flags are the apiserver's etcd flags for e.
func (e *Etcd) flags() []string {
	out := []string{"--etcd-servers=" + strings.Join(e.Servers, ","),
		"--etcd-cafile=" + e.CAFile, "--etcd-certfile=" + e.CertFile, "--etcd-keyfile=" + e.KeyFile}
	if e.Prefix != "" {
		out = append(out, "--etcd-prefix="+e.Prefix)
	}
	return out
}

// Server is a running kube-apiserver and its etcd.
type Server struct {
	dir, bin string
	port     int
	token    string
	opts     Options
	etcd     *etcdlocal.Server // nil with Options.Etcd
	proc     *childproc.Proc
}

// Start starts etcd (unless Options.Etcd is set) and kube-apiserver in a
// fresh temporary folder.
func Start(ctx context.Context, opts Options) (_ *Server, err error) {
	if opts.Version == "" {
		opts.Version = kubebuild.Selected()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	binary := kubebuild.Binary
	if opts.NoBuild {
		binary = kubebuild.CachedBinary
	}
	bin, err := binary(ctx, opts.Version)
	if err != nil {
		return nil, fmt.Errorf("kubeapi: %w", err)
	}
	dir, err := os.MkdirTemp("", "kubeapi-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, opts: opts}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if opts.Etcd == nil {
		s.etcd, err = etcdlocal.Start(ctx, etcdlocal.Config{Dir: filepath.Join(dir, "etcd"), ClientAddr: "127.0.0.1:0", Log: opts.Log})
		if err != nil {
			return nil, fmt.Errorf("kubeapi: etcd: %w", err)
		}
	}
	if err := s.writeFiles(); err != nil {
		return nil, fmt.Errorf("kubeapi: %w", err)
	}
	if s.port, err = freeport.Port(); err != nil {
		return nil, fmt.Errorf("kubeapi: %w", err)
	}
	return s, s.Start(ctx)
}

// writeFiles writes the service-account key pair and the token file.
func (s *Server) writeFiles() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	s.token = hex.EncodeToString(tok)
	tokens := s.token + ",admin,admin,system:masters\n"
	for _, l := range s.opts.ExtraTokens {
		tokens += l + "\n"
	}
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv": []byte(tokens),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(s.dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) args() []string {
	authz := "AlwaysAllow"
	if s.opts.RBAC {
		authz = "RBAC"
	}
	f := func(name string) string { return filepath.Join(s.dir, name) }
	args := []string{
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + f("sa.pub"),
		"--service-account-signing-key-file=" + f("sa.key"),
		"--cert-dir=" + f("certs"),
		"--secure-port=" + strconv.Itoa(s.port),
		"--bind-address=127.0.0.1",
		"--authorization-mode=" + authz,
		"--token-auth-file=" + f("tokens.csv"),
		"--service-cluster-ip-range=10.0.0.0/24",
	}
	if s.opts.Etcd != nil {
		return append(args, s.opts.Etcd.flags()...)
	}
	return append(args, "--etcd-servers="+s.etcd.Endpoint())
}

// Start starts the apiserver process (again, after Stop) on the same port,
// etcd and certificates, and waits until /readyz answers ok.
func (s *Server) Start(ctx context.Context) error {
	if s.proc != nil && !s.proc.Exited() {
		return errors.New("kubeapi: already running")
	}
	p, err := childproc.Start(childproc.Spec{Path: s.bin, Args: s.args(), Log: filepath.Join(s.dir, "kube-apiserver.log")})
	if err != nil {
		return fmt.Errorf("kubeapi: %w", err)
	}
	s.proc = p
	return s.waitReady(ctx)
}

// waitReady polls /readyz: kube-apiserver offers no readiness signal (no
// sd_notify, no ready line meant for machines), so polling is the only way.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyBound)
	defer cancel()
	var last error
	for {
		select {
		case <-s.proc.Done():
			return fmt.Errorf("kubeapi: kube-apiserver exited (%v) before it was ready; see %s", s.proc.Err(), filepath.Join(s.dir, "kube-apiserver.log"))
		default:
		}
		if last = s.ready(ctx); last == nil {
			return nil
		}
		if !sleep.For(ctx, 100*time.Millisecond) {
			return fmt.Errorf("kubeapi: not ready within %v: %v; see %s", ReadyBound, last, filepath.Join(s.dir, "kube-apiserver.log"))
		}
	}
}

func (s *Server) ready(ctx context.Context) error {
	hc, err := s.HTTPClient()
	if err != nil {
		return err // the certificate is not written yet
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/readyz", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// Stop stops the apiserver process (SIGTERM, SIGKILL after a bound); etcd
// keeps running. kube-apiserver's graceful shutdown waits for open watches
// to end, which clients keep open for minutes: with clients watching, use Kill.
func (s *Server) Stop(ctx context.Context) error {
	if s.proc == nil {
		return nil
	}
	return s.proc.Stop(ctx, 30*time.Second)
}

// Kill SIGKILLs the apiserver process (a crash) and waits until it is
// reaped; etcd keeps running.
func (s *Server) Kill() {
	if s.proc != nil {
		s.proc.Kill()
	}
}

// Close stops the apiserver and its own etcd (not Options.Etcd's) and
// removes the folder.
func (s *Server) Close() {
	if s.proc != nil {
		s.proc.Kill()
	}
	if s.etcd != nil {
		s.etcd.Close()
	}
	os.RemoveAll(s.dir)
}

// URL is the apiserver's base URL.
func (s *Server) URL() string { return "https://127.0.0.1:" + strconv.Itoa(s.port) }

// caFile holds the self-signed serving certificate and the CA that signed
// it, which kube-apiserver writes into --cert-dir at its first start.
func (s *Server) caFile() string { return filepath.Join(s.dir, "certs", "apiserver.crt") }

// Config is a client configuration for the admin (system:masters). Like
// every configuration here it has no client-side rate limit (QPS -1), as
// kubelease requires.
func (s *Server) Config() *rest.Config { return s.TokenConfig(s.token) }

// TokenConfig is a client configuration authenticating with token (one of
// Options.ExtraTokens).
func (s *Server) TokenConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            s.URL(),
		QPS:             -1,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.caFile()},
	}
}

// HTTPClient is an HTTPS client that trusts the server's certificate and
// sends the admin's token (for /readyz, /metrics).
func (s *Server) HTTPClient() (*http.Client, error) {
	pem, err := os.ReadFile(s.caFile())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("kubeapi: no certificate in %s", s.caFile())
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	return &http.Client{Transport: bearer{tr, s.token}, Timeout: 5 * time.Second}, nil
}

// bearer adds the admin's token to every request.
type bearer struct {
	rt    http.RoundTripper
	token string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// Token is the admin's bearer token.
func (s *Server) Token() string { return s.token }

// Dir is the server's folder (its log is kube-apiserver.log there).
func (s *Server) Dir() string { return s.dir }
