package acmeflow

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/go-acme/lego/v5/acme"
	"github.com/go-acme/lego/v5/acme/api"
	"github.com/go-acme/lego/v5/certcrypto"
	"github.com/go-acme/lego/v5/certificate"
	"github.com/go-acme/lego/v5/challenge/resolver"
	"github.com/go-acme/lego/v5/lego"

	"github.com/snip/snip-jobs/internal/sleep"
	"github.com/snip/snip-jobs/scheduler"
)

// caSession is a pass's conversation with the CA: one lego client, logged in
// with the shared account, on a transport bound to the term (no request
// leaves once the term has ended, lego's own with context.Background()
// included). Only obtain places a new order; the other calls read, or move
// on an order the CA has already.
type caSession struct {
	client *lego.Client
	acct   *acmeUser
	http   *http.Client // for the requests lego makes only inside Obtain (core)
	base   *http.Transport
	dir    string
}

// dialCA opens a session with the CA at opts.Directory for acct, bound to
// term. It fetches the directory; it does not register the account.
func dialCA(term context.Context, acct *acmeUser, opts *Config) (*caSession, error) {
	httpClient, base := newHTTPClient(term, opts.Roots, opts.Concurrency)
	cfg := lego.NewConfig(acct)
	cfg.CADirURL = opts.Directory
	cfg.HTTPClient = httpClient
	cfg.UserAgent = userAgent
	cfg.Certificate = lego.CertificateConfig{Timeout: opts.OrderTimeout}

	// lego.NewClient fetches the directory with context.Background(): the
	// transport binds that request to the term.
	client, err := lego.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return &caSession{client: client, acct: acct, http: httpClient, base: base, dir: opts.Directory}, nil
}

// answerWith makes the session answer challenges with dns (DNS-01) or, when
// it is nil, with HTTP-01 through the shared table, fenced by r's token.
func (s *caSession) answerWith(dns DNS01Provider, r *scheduler.Run) error {
	if dns != nil {
		return s.client.Challenge.SetDNS01Provider(dns)
	}
	return s.client.Challenge.SetHTTP01Provider(&httpProvider{r: r})
}

// close lets go of the session's idle connections.
func (s *caSession) close() { s.base.CloseIdleConnections() }

// renewalInfo asks the CA for the renewal window of leaf (RFC 9773).
func (s *caSession) renewalInfo(ctx context.Context, leaf *x509.Certificate) (*certificate.RenewalInfo, error) {
	return s.client.Certificate.GetRenewalInfo(ctx, leaf)
}

// certificate fetches an issued certificate, with its chain, at url.
func (s *caSession) certificate(ctx context.Context, url string) (*certificate.Resource, error) {
	return s.client.Certificate.Get(ctx, url, true)
}

// Asking the CA about an earlier order still being processed: this many
// times, this far apart.
const (
	orderPolls    = 5
	orderPollWait = time.Second
)

// solvePending answers the challenges of the pending order o, with the
// session's HTTP-01 (or DNS-01) provider: authorizations that are pending and
// whose challenges the CA is not already validating (a paused term may have
// asked it to) are solved through lego's resolver; those already being
// validated are waited for. It returns once every authorization is valid, or
// with the first failure (an invalid authorization is the order's failure).
func (s *caSession) solvePending(ctx context.Context, o acme.Order) error {
	core, err := s.core()
	if err != nil {
		return err
	}
	var solve []acme.Authorization
	var validating []string
	for _, u := range o.Authorizations {
		a, err := core.Authorizations.Get(ctx, u)
		if err != nil {
			return fmt.Errorf("authorization %s: %w", u, err)
		}
		switch {
		case a.Status != acme.StatusPending:
			// valid: nothing to do; invalid: the order is too, and
			// askOrder will say so.
		case slices.ContainsFunc(a.Challenges, func(c acme.Challenge) bool { return c.Status == acme.StatusProcessing }):
			validating = append(validating, u)
		default:
			solve = append(solve, a)
		}
	}
	if err := resolver.NewProber(s.client.Challenge).Solve(ctx, solve); err != nil {
		return err
	}
	for _, u := range validating {
		for i := 1; ; i++ {
			a, err := core.Authorizations.Get(ctx, u)
			if err != nil {
				return fmt.Errorf("authorization %s: %w", u, err)
			}
			if a.Status == acme.StatusInvalid {
				return fmt.Errorf("invalid authorization %s: %w", u, authzError(a))
			}
			if a.Status != acme.StatusPending || i == orderPolls {
				break
			}
			if !sleep.For(ctx, orderPollWait) {
				return context.Cause(ctx)
			}
		}
	}
	return nil
}

// authzError is the problem of an invalid authorization's failed challenge.
func authzError(a acme.Authorization) error {
	for _, c := range a.Challenges {
		if c.Status == acme.StatusInvalid && c.Error != nil {
			return c.Err()
		}
	}
	return errors.New("no challenge error given")
}

// askOrder asks the CA for an order's state, waiting a little while it is
// still processing; its Certificate is the certificate's URL once it is valid.
func (s *caSession) askOrder(ctx context.Context, orderURL string) (acme.Order, error) {
	core, err := s.core()
	if err != nil {
		return acme.Order{}, err
	}
	for i := 1; ; i++ {
		o, err := core.Orders.Get(ctx, orderURL)
		if err != nil {
			return acme.Order{}, err
		}
		if o.Status != acme.StatusProcessing || i == orderPolls {
			if o.Status != acme.StatusValid {
				o.Certificate = ""
			}
			return o.Order, nil
		}
		if !sleep.For(ctx, orderPollWait) {
			return acme.Order{}, context.Cause(ctx)
		}
	}
}

// finalizeReady finalizes the ready order at orderURL with a CSR for name
// signed by key (the order's own), and returns the order once the CA has
// processed it (as askOrder).
func (s *caSession) finalizeReady(ctx context.Context, name, orderURL, finalizeURL string, key crypto.Signer) (acme.Order, error) {
	csr, err := certcrypto.CreateCSR(key, certcrypto.CSROptions{SAN: []string{name}})
	if err != nil {
		return acme.Order{}, err
	}
	core, err := s.core()
	if err != nil {
		return acme.Order{}, err
	}
	o, err := core.Orders.UpdateForCSR(ctx, finalizeURL, csr)
	if err != nil {
		return acme.Order{}, fmt.Errorf("finalize: %w", err)
	}
	if o.Status == acme.StatusValid && o.Certificate != "" {
		return o.Order, nil
	}
	return s.askOrder(ctx, orderURL)
}

// core is an ACME client core on the session's transport, with the shared
// account: for the requests lego makes only inside Obtain.
func (s *caSession) core() (*api.Core, error) {
	return api.New(s.http, userAgent, s.dir, s.acct.url, s.acct.key)
}

// obtain places a new order (lego's Certificate.Obtain), except that it
// returns as soon as ctx ends. lego's wait for an order the CA is still processing polls and sleeps
// until the order timeout without looking at the context (its requests fail
// at once, but the loop goes on), so a term that ended during that wait would
// otherwise hold its pass, and the hand-over behind it, for up to
// order_timeout. The abandoned call finishes by itself within that time,
// without reaching the CA; nobody reads its result.
func (s *caSession) obtain(ctx context.Context, req certificate.ObtainRequest) (*certificate.Resource, error) {
	type result struct {
		res *certificate.Resource
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.client.Certificate.Obtain(ctx, req)
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		return r.res, r.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
