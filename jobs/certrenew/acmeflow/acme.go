package acmeflow

import (
	"bytes"
	"cmp"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-acme/lego/v5/acme"
)

// userAgent identifies the renewer to the CA (lego adds its own).
const userAgent = "snip-jobs-certrenew"

// acmeUser is the shared account, as lego wants it.
type acmeUser struct {
	email string
	url   string // "" until registered
	key   crypto.Signer
}

func (u *acmeUser) GetEmail() string             { return u.email }
func (u *acmeUser) GetPrivateKey() crypto.Signer { return u.key }
func (u *acmeUser) GetRegistration() *acme.ExtendedAccount {
	if u.url == "" {
		return nil
	}
	return &acme.ExtendedAccount{Location: u.url}
}

// observation is what the transport saw of the CA's answers during one lego
// call: lego hides some of them (the 409 alreadyReplaced it answers by
// ordering again without "replaces"; the Retry-After of a 503).
type observation struct {
	mu              sync.Mutex
	alreadyReplaced int
	unavailable     bool
	rateLimited     bool
	retryAfter      time.Duration // of the last 429 or 503
	orderURL        string        // of the order, once the CA created it
	certURL         string        // of the order, once the CA said it is valid
	finalized       bool          // the CA accepted the CSR: it said the order is processing or valid
	onOrder         func(orderURL, certURL string)
}

func (o *observation) snapshot() (alreadyReplaced int, unavailable, rateLimited bool, retryAfter time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.alreadyReplaced, o.unavailable, o.rateLimited, o.retryAfter
}

// finalizedOrder reports whether the CA accepted the order's CSR: it issues
// the certificate, or has, whatever became of lego's call afterwards.
func (o *observation) finalizedOrder() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.finalized
}

// urls are the order's URL (once the CA created it) and its certificate's
// (once the CA said the order is valid: the certificate exists from that
// moment, whether or not lego gets to download it); "" until then.
func (o *observation) urls() (orderURL, certURL string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.orderURL, o.certURL
}

type observationKey struct{}

// observe returns a context whose CA requests are recorded in the returned
// observation. onOrder, if not nil, is called in the transport, before lego
// sees the answer, when the CA has created the order (its URL) and when it
// says the order is valid (the certificate's URL too).
func observe(ctx context.Context, onOrder func(orderURL, certURL string)) (context.Context, *observation) {
	o := &observation{onOrder: onOrder}
	return context.WithValue(ctx, observationKey{}, o), o
}

// caTransport is the HTTP transport of every CA request. It binds each
// request to the term's context, including the ones lego makes with
// context.Background() (the directory fetch in lego.NewClient), and records
// the answers lego does not pass on.
type caTransport struct {
	base http.RoundTripper
	term context.Context
}

func (t *caTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.term.Err() != nil {
		return nil, fmt.Errorf("certrenew: not asking the CA: %w", context.Cause(t.term))
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(t.term, func() { cancel(context.Cause(t.term)) })
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stop()
		cancel(nil)
		return nil, err
	}
	if o, ok := req.Context().Value(observationKey{}).(*observation); ok {
		t.record(o, resp)
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: func() { stop(); cancel(nil) }}
	return resp, nil
}

func (t *caTransport) record(o *observation, resp *http.Response) {
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusOK:
		// newOrder's answer (201) is the order, at its URL (Location); an
		// order answered as valid — finalize's answer, or a poll of the
		// order — names its certificate's URL (RFC 8555 §7.1.3, §7.4).
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			return
		}
		body, err := peek(resp)
		if err != nil {
			return
		}
		var order struct {
			Status      string `json:"status"`
			Finalize    string `json:"finalize"` // only orders have it
			Certificate string `json:"certificate"`
		}
		if json.Unmarshal(body, &order) != nil || order.Finalize == "" {
			return
		}
		o.mu.Lock()
		if order.Status == acme.StatusProcessing || order.Status == acme.StatusValid {
			o.finalized = true
		}
		changed := false
		if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusCreated && loc != "" && loc != o.orderURL {
			o.orderURL, changed = loc, true
		}
		if order.Status == acme.StatusValid && order.Certificate != "" && order.Certificate != o.certURL {
			o.certURL, changed = order.Certificate, true
		}
		orderURL, certURL := o.orderURL, o.certURL
		o.mu.Unlock()
		if changed && o.onOrder != nil {
			o.onOrder(orderURL, certURL)
		}
	case http.StatusConflict:
		body, err := peek(resp)
		if err != nil {
			return
		}
		var p struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(body, &p) == nil && p.Type == acme.AlreadyReplacedErrorType {
			o.mu.Lock()
			o.alreadyReplaced++
			o.mu.Unlock()
		}
	case http.StatusTooManyRequests:
		o.mu.Lock()
		o.rateLimited = true
		o.retryAfter = retryAfter(resp.Header.Get("Retry-After"))
		o.mu.Unlock()
	case http.StatusServiceUnavailable:
		o.mu.Lock()
		o.unavailable = true
		o.retryAfter = retryAfter(resp.Header.Get("Retry-After"))
		o.mu.Unlock()
	}
}

// peek reads a JSON answer's body (up to 64 KiB: orders and problems are far
// smaller) and puts it back for lego.
func peek(resp *http.Response) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	rest := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), rest), rest}
	return body, err
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(30*24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

type releasingBody struct {
	io.ReadCloser
	release func()
	once    sync.Once
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// newHTTPClient returns the client of one pass's lego calls.
func newHTTPClient(term context.Context, roots *x509.CertPool, conns int) (*http.Client, *http.Transport) {
	base := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   30 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		MaxIdleConnsPerHost:   conns + 2,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Timeout:   2 * time.Minute,
		Transport: &caTransport{base: base, term: term},
	}, base
}

// Failure reasons (the failures metric's reason label, last_error_reason).
const (
	ReasonRateLimited = "rate_limited"
	ReasonUnavailable = "unavailable"
	ReasonChallenge   = "challenge"
	ReasonRejected    = "rejected_identifier"
	ReasonCAA         = "caa"
	ReasonDNS         = "dns"
	ReasonBadCSR      = "bad_csr"
	ReasonCAError     = "ca_error"
	ReasonNetwork     = "network"
	ReasonCertificate = "bad_certificate"
	ReasonARI         = "ari"
	ReasonOther       = "other"
)

// failure is a classified error of one CA call.
type failure struct {
	reason     string
	retryAfter time.Duration // from the CA, 0 if it gave none
	pause      bool          // the whole renewer stops asking the CA
	counts     bool          // counts toward the domain's backoff
	err        error
}

// classify turns a lego error (and what the transport saw) into a failure.
func classify(err error, obs *observation) failure {
	_, unavailable, rateLimited, ra := obs.snapshot()
	f := failure{reason: ReasonOther, counts: true, err: err}

	var rl *acme.RateLimitedError
	var pd *acme.ProblemDetails
	switch {
	case errors.As(err, &rl):
		f.reason, f.counts, f.retryAfter = ReasonRateLimited, false, cmp.Or(rl.RetryAfter, ra)
		return f
	case errors.As(err, &pd) && pd.Type == acme.RateLimitedErrorType:
		f.reason, f.counts, f.retryAfter = ReasonRateLimited, false, ra
		return f
	case rateLimited:
		f.reason, f.counts, f.retryAfter = ReasonRateLimited, false, ra
		return f
	case unavailable || errors.As(err, &pd) && pd.HTTPStatus == http.StatusServiceUnavailable:
		f.reason, f.counts, f.pause, f.retryAfter = ReasonUnavailable, false, true, ra
		return f
	}
	if errors.As(err, &pd) {
		t := pd.Type
		for _, sp := range pd.SubProblems {
			if t == acme.CompoundErrorType || t == "" {
				t = sp.Type
			}
		}
		switch t {
		case acme.UnauthorizedErrorType, acme.IncorrectResponseErrorType, acme.ConnectionErrorType, acme.TLSErrorType:
			f.reason = ReasonChallenge
		case acme.RejectedIdentifierErrorType, acme.MalformedErrorType, acme.UnsupportedIdentifierErrorType:
			f.reason = ReasonRejected
		case acme.CaaErrorType:
			f.reason = ReasonCAA
		case acme.DNSErrorType:
			f.reason = ReasonDNS
		case acme.BadCSRErrorType:
			f.reason = ReasonBadCSR
		default:
			f.reason = ReasonCAError
		}
		return f
	}
	var ne net.Error
	if errors.As(err, &ne) || strings.Contains(err.Error(), "unable to communicate with the API server") {
		f.reason = ReasonNetwork
	}
	// lego reports a failed challenge as text ("invalid authorization",
	// "the server didn't respond to our request") around an ACME problem.
	if msg := err.Error(); strings.Contains(msg, "invalid authorization") || strings.Contains(msg, "invalid challenge") {
		f.reason = ReasonChallenge
	}
	return f
}
