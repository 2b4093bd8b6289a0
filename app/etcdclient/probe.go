package etcdclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/snip/snip-jobs/configs"
)

// Endpoint is what Probe learned of one endpoint.
type Endpoint struct {
	URL string
	// Version is the etcd server's version ("3.7.3"), when it answered.
	Version string
	// Err is why the endpoint cannot be used (an *EndpointError), nil when
	// it can.
	Err error
}

// EndpointError is why one endpoint cannot be used.
type EndpointError struct {
	Endpoint string
	// Refused: the server answered and refused us (TLS or login), which
	// waiting will not change. Otherwise it did not answer.
	Refused bool
	// Cause says what is wrong, in words.
	Cause string
	Err   error
}

func (e *EndpointError) Error() string {
	return fmt.Sprintf("etcd %s: %s: %v", e.Endpoint, e.Cause, e.Err)
}

func (e *EndpointError) Unwrap() error { return e.Err }

// Probe asks every endpoint for its version (GET /version over the client's
// TLS settings), each bounded by DialTimeout. It does not log in: a login
// costs the member a bcrypt check and a raft round.
func Probe(ctx context.Context, cfg Config) []Endpoint {
	out := make([]Endpoint, len(cfg.Endpoints))
	tc, err := cfg.tlsConfig()
	var wg sync.WaitGroup
	for i, ep := range cfg.Endpoints {
		out[i].URL = ep
		if err != nil {
			out[i].Err = &EndpointError{Endpoint: ep, Refused: true, Cause: "cannot load the TLS files", Err: err}
			continue
		}
		wg.Go(func() {
			out[i].Version, out[i].Err = probe(ctx, cfg, tc, ep)
		})
	}
	wg.Wait()
	return out
}

// Usable is nil when some endpoint can be used, else the endpoints' errors:
// one *EndpointError per cause, naming every endpoint that fails that way.
func Usable(eps []Endpoint) error {
	var groups []*EndpointError
	by := map[string]*EndpointError{}
	for _, e := range eps {
		if e.Err == nil {
			return nil
		}
		var ee *EndpointError
		if !errors.As(e.Err, &ee) {
			ee = &EndpointError{Endpoint: e.URL, Cause: "cannot connect", Err: e.Err}
		}
		key := ee.Cause + "\x00" + ee.Err.Error()
		if g, ok := by[key]; ok {
			g.Endpoint += ", " + e.URL
			continue
		}
		g := *ee
		g.Endpoint = e.URL
		by[key] = &g
		groups = append(groups, &g)
	}
	switch len(groups) {
	case 0:
		return errors.New("etcd: no endpoints")
	case 1:
		return groups[0]
	}
	errs := make([]error, len(groups))
	for i, g := range groups {
		errs[i] = g
	}
	return errors.Join(errs...)
}

func probe(ctx context.Context, cfg Config, tc *tls.Config, ep string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	version, err := getVersion(ctx, tls12(tc), ep)
	if err != nil && strings.Contains(err.Error(), "protocol version") {
		version, err = getVersion(ctx, tc, ep) // a TLS 1.3-only server
	}
	if err != nil {
		return "", classify(cfg, ep, err)
	}
	return version, nil
}

// tls12 is tc limited to TLS 1.2, for the probe: in TLS 1.3 the client's
// handshake completes before the server has checked the client certificate,
// and a refusal may then reach the client as a reset connection instead of the
// server's alert; in TLS 1.2 the handshake fails with the alert.
func tls12(tc *tls.Config) *tls.Config {
	if tc == nil {
		return nil
	}
	c := tc.Clone()
	c.MaxVersion = tls.VersionTLS12
	return c
}

// getVersion is GET <ep>/version: the server's version, or why the request
// failed (the TLS handshake's error, a refused connection...).
func getVersion(ctx context.Context, tc *tls.Config, ep string) (string, error) {
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(ep, "/")+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusBadRequest && strings.Contains(string(body), "HTTPS server") {
		return "", errPlainToTLS
	}
	var v struct {
		Server string `json:"etcdserver"`
	}
	_ = json.Unmarshal(body, &v) // another answer: not what etcd says, but the link works
	return v.Server, nil
}

var errPlainToTLS = errors.New("an HTTP request reached a TLS-only server")

// classify turns the version request's error into an *EndpointError.
func classify(cfg Config, ep string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is in the message already, as the endpoint
	}
	refused := func(cause string) error { return &EndpointError{Endpoint: ep, Refused: true, Cause: cause, Err: err} }
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, errPlainToTLS):
		return refused("it serves TLS only: write the endpoint as https://")
	case errors.As(err, &record):
		return refused("it does not speak TLS: write the endpoint as http://, or enable TLS on etcd")
	case errors.As(err, &unknown):
		if cfg.CA == "" {
			return refused("its certificate is not signed by a CA this system trusts (set etcd.tls.ca)")
		}
		return refused(fmt.Sprintf("its certificate is not signed by the CA in etcd.tls.ca %s", cfg.CA))
	case errors.As(err, &hostname):
		return refused("its certificate is not valid for this address")
	case errors.As(err, &invalid):
		return refused("its certificate is not valid: " + invalid.Error())
	}
	// The server's alerts arrive as "remote error: tls: <alert>".
	msg := err.Error()
	switch {
	case strings.Contains(msg, "tls: expired certificate"):
		return refused("it refused our client certificate " + cfg.Cert + ": " + notAfter(cfg.Cert))
	case strings.Contains(msg, "tls: certificate required"):
		return refused("it requires a client certificate (set etcd.tls.cert and etcd.tls.key)")
	case strings.Contains(msg, "tls: bad certificate"), strings.Contains(msg, "tls: unknown certificate authority"),
		strings.Contains(msg, "tls: unknown certificate"), strings.Contains(msg, "tls: unsupported certificate"):
		return refused("it refused our client certificate " + cfg.Cert + " (not signed by a CA it trusts?)")
	}
	return &EndpointError{Endpoint: ep, Cause: "cannot connect", Err: err}
}

// notAfter says when the certificate in file expires(d).
func notAfter(file string) string {
	b, err := configs.ReadFile(configs.NamedFile{Key: "etcd.tls.cert", Path: file, Holds: configs.Certificates})
	if err != nil {
		return "expired?"
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "expired?"
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return "expired?"
	}
	if time.Now().After(c.NotAfter) {
		return "it expired at " + c.NotAfter.UTC().Format(time.RFC3339)
	}
	return "it is valid until " + c.NotAfter.UTC().Format(time.RFC3339) + " here, but the server says expired (clocks?)"
}
