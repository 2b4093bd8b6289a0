package acmeflow

import (
	"context"
	"crypto"
	"errors"
	"log/slog"
	"time"

	"github.com/go-acme/lego/v5/acme/api"
	"github.com/go-acme/lego/v5/certificate"

	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
)

// Orderer works on one domain at a time for the pass's workers: it
// refreshes the renewal window (ARI) when due, and orders a certificate when
// the domain has none or its renewal instant has come. It guarantees that an
// order is recorded before the CA hears of it; that none is placed while the
// renewer is paused, while the domain backs off, past the budget, or before
// the lock-delay (finishing an order the CA has already places none); and
// that a certificate the CA issued to an unfinished order is stored, not
// ordered again. Safe for concurrent use on distinct domains.
type Orderer struct {
	ca       *caSession
	store    *domainstore.Store
	gate     Gate
	throttle *caThrottle
	stale    func(error) // ends the pass when err says a newer term has written
	clock    *domainstore.Clock
	opts     *Config
	m        *Counters
	job      string
	log      *slog.Logger
}

// Do works on one domain: refreshes its ARI window when due, and orders a
// certificate when it has none or its renewal instant has come. It returns
// the domain's state afterwards.
func (o *Orderer) Do(ctx context.Context, d *domainstore.Domain) string {
	log := o.log.With("domain", d.Name)
	if d.Cert != nil && !o.clock.Now().Before(d.Cert.ARINextCheck) {
		if w, _ := o.throttle.left(); w == 0 {
			o.checkARI(ctx, d, log)
		}
	}
	if d.Cert != nil && o.clock.Now().Before(d.Cert.RenewAt) {
		return d.State(o.clock.Now())
	}
	switch {
	case ctx.Err() != nil:
		return d.State(o.clock.Now())
	case d.NextAttempt != nil && o.clock.Now().Before(*d.NextAttempt):
		log.DebugContext(ctx, "due, but waiting before the next attempt", "next_attempt", *d.NextAttempt, "failures", d.Failures)
		return d.State(o.clock.Now())
	}
	if w, reason := o.throttle.left(); w > 0 {
		log.DebugContext(ctx, "due, but the renewer is paused", "reason", reason)
		return d.State(o.clock.Now())
	}
	// The CA may have the order an earlier term left in flight. Finishing
	// it (answering its challenges, finalizing it, fetching and storing its
	// certificate) orders nothing new, and the CA moves an order through
	// its states once, so it need not wait for the lock-delay. It is tried
	// again after the lock-delay: an earlier term that was paused, not dead,
	// may have noted where the CA has its order meanwhile.
	recovered := func() bool { return d.OrderID != nil && o.finishUnfinished(ctx, d, d.Replaces(), log) }
	if recovered() {
		return d.State(o.clock.Now())
	}
	delayed, err := o.gate.BeforeOrder(ctx)
	if err != nil || delayed && recovered() {
		return d.State(o.clock.Now())
	}
	o.order(ctx, d, log)
	return d.State(o.clock.Now())
}

// checkARI asks the CA for the certificate's renewal window (RFC 9773) and,
// when the window is new, picks the renewal instant inside it.
func (o *Orderer) checkARI(ctx context.Context, d *domainstore.Domain, log *slog.Logger) {
	c := d.Cert
	octx, obs := observe(ctx, nil)
	info, err := o.ca.renewalInfo(octx, c.Leaf)
	if ctx.Err() != nil {
		return
	}
	var next time.Duration
	renewAt, start, end := c.RenewAt, c.ARIStart, c.ARIEnd
	switch {
	case errors.Is(err, api.ErrNoARI):
		next = ariDefault
		start, end = nil, nil
		renewAt = o.opts.Policy.RenewAt(c.NotBefore, c.NotAfter)
	case err != nil:
		f := classify(err, obs)
		o.m.Failures.WithLabelValues(o.job, ReasonARI).Inc()
		log.WarnContext(ctx, "renewal info (ARI) check failed; keeping the current renewal instant", "reason", f.reason, "err", err)
		o.throttle.failed(ctx, f, d.Name)
		next = ariAfterFailure
	default:
		ws, we := info.SuggestedWindow.Start, info.SuggestedWindow.End
		if start == nil || end == nil || !start.Equal(ws) || !end.Equal(we) {
			renewAt = pickInWindow(ws, we, lastSafeRenewal(c.NotBefore, c.NotAfter))
			log.InfoContext(ctx, "renewal window from the CA", "window_start", ws, "window_end", we, "renew_at", renewAt)
		}
		start, end = &ws, &we
		next = ariRecheck(info.RetryAfter)
	}
	if err := o.store.StoreWindow(ctx, c, start, end, renewAt, next); err != nil {
		o.stale(err)
		log.WarnContext(ctx, "could not store the renewal window", "err", err)
	}
}

// order asks the CA for a certificate for d: the order is recorded in flight
// (fenced) before the first request, so that a successor finds it; then the
// result is stored or the failure recorded, both fenced.
func (o *Orderer) order(ctx context.Context, d *domainstore.Domain, log *slog.Logger) {
	replaces := d.Replaces()
	orderID, key, err := o.store.BeginOrder(ctx, d, replaces, log)
	switch {
	case errors.Is(err, domainstore.ErrBudget):
		return
	case err != nil:
		o.stale(err)
		if ctx.Err() == nil {
			log.ErrorContext(ctx, "could not record the order; not ordering", "err", err)
		}
		return
	}

	res, obs, err := o.obtain(ctx, d, orderID, key, replaces, log)
	if ctx.Err() != nil {
		// The term (or the pass) ended: whatever happened at the CA, this
		// term cannot store it. The order stays in flight for the
		// successor, which resumes it after the lock-delay (and fetches
		// the certificate when it was issued).
		orderURL, certURL := obs.urls()
		log.InfoContext(ctx, "order interrupted; left in flight for the next leader", "order_id", orderID,
			"order_url", orderURL, "issued", certURL != "", "cause", context.Cause(ctx))
		return
	}
	conflicts, _, _, _ := obs.snapshot()
	if conflicts > 0 {
		o.m.AlreadyReplaced.WithLabelValues(o.job).Add(float64(conflicts))
		log.WarnContext(ctx, "the CA answered 409 alreadyReplaced: lego ordered again without \"replaces\" (not an ARI renewal)",
			"replaces", replaces, "order_id", orderID)
	}
	if err == nil && res == nil {
		err = errors.New("lego returned no certificate and no error")
	}
	if err != nil && obs.finalizedOrder() {
		// The CA accepted the CSR before lego's call failed (a download
		// refused, say): the certificate is issued or will be. Fetch it
		// rather than fail the order and, later, order a second one.
		log.WarnContext(ctx, "ordering failed after the CA accepted the CSR; fetching the certificate it issued",
			"order_id", orderID, "err", err)
		if o.finishUnfinished(ctx, d, replaces, log) {
			return
		}
	}
	if err != nil {
		o.failed(ctx, d, orderID, classify(err, obs), log)
		return
	}
	o.keep(ctx, d, orderID, res, key, replaces, conflicts > 0, log)
}

// obtain places order orderID at the CA. What the CA says about it (its URL;
// the certificate's once valid) is noted at once, outside the fence: if this
// term cannot store the certificate (its term over mid-order, its store
// refused, its process gone), the next one fetches it instead of ordering
// again.
func (o *Orderer) obtain(ctx context.Context, d *domainstore.Domain, orderID int64, key crypto.Signer, replaces string,
	log *slog.Logger) (*certificate.Resource, *observation, error) {
	octx, obs := observe(ctx, func(orderURL, certURL string) { o.store.RecordURLs(ctx, d, orderID, orderURL, certURL, log) })
	res, err := o.ca.obtain(octx, certificate.ObtainRequest{
		Domains:        []string{d.Name},
		PrivateKey:     key,
		Bundle:         true,
		Profile:        o.opts.Profile,
		ReplacesCertID: replaces,
	})
	return res, obs, err
}

// keep stores the certificate issued to order orderID; one that does not
// match the order counts as the order's failure.
func (o *Orderer) keep(ctx context.Context, d *domainstore.Domain, orderID int64, res *certificate.Resource, key crypto.Signer,
	replaces string, conflict bool, log *slog.Logger) {
	if err := o.store.StoreCert(ctx, d, orderID, res, key, replaces, conflict, log); err != nil {
		o.stale(err)
		if errors.Is(err, domainstore.ErrBadCertificate) {
			o.failed(ctx, d, orderID, failure{reason: ReasonCertificate, counts: true, err: err}, log)
			return
		}
		log.ErrorContext(ctx, "could not store the certificate", "order_id", orderID, "err", err)
	}
}

// failed records a failed order: the domain backs off (or waits for the
// CA's Retry-After), and a 503 pauses the whole renewer.
func (o *Orderer) failed(ctx context.Context, d *domainstore.Domain, orderID int64, f failure, log *slog.Logger) {
	o.m.Orders.WithLabelValues(o.job, "failed").Inc()
	o.m.Failures.WithLabelValues(o.job, f.reason).Inc()
	failures := d.Failures
	if f.counts {
		failures++
	}
	wait := retryWait(f, failures, o.opts.UnavailablePause)
	o.throttle.failed(ctx, f, d.Name)
	if err := o.store.RecordFailure(ctx, d, orderID, f.reason, f.err, failures, wait); err != nil {
		o.stale(err)
		log.ErrorContext(ctx, "could not record the failed order", "err", err)
		return
	}
	log.WarnContext(ctx, "order failed", "order_id", orderID, "reason", f.reason, "failures", failures,
		"next_attempt_in", wait.Round(time.Second), "err", f.err)
}
