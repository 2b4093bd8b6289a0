package certrenew

import (
	"context"
	"crypto"
	"errors"
	"log/slog"
	"time"

	"github.com/go-acme/lego/v5/acme/api"
	"github.com/go-acme/lego/v5/certificate"
)

// orderer works on one domain at a time for the pass's workers: it
// refreshes the renewal window (ARI) when due, and orders a certificate when
// the domain has none or its renewal instant has come. It guarantees that an
// order is recorded before the CA hears of it; that none is placed while the
// renewer is paused, while the domain backs off, past the budget, or before
// the lock-delay (finishing an order the CA has already places none); and
// that a certificate the CA issued to an unfinished order is stored, not
// ordered again. Safe for concurrent use on distinct domains.
type orderer struct {
	ca       *caSession
	store    *domainStore
	gate     *lockDelay
	throttle *caThrottle
	stop     *stopper
	clock    *dbClock
	opts     *Options
	m        *metrics
	job      string
	log      *slog.Logger
}

// do works on one domain: refreshes its ARI window when due, and orders a
// certificate when it has none or its renewal instant has come. It returns
// the domain's state afterwards.
func (o *orderer) do(ctx context.Context, d *domain) string {
	log := o.log.With("domain", d.name)
	if d.cert != nil && !o.clock.now().Before(d.cert.ariNextCheck) {
		if w, _ := o.throttle.left(); w == 0 {
			o.checkARI(ctx, d, log)
		}
	}
	if d.cert != nil && o.clock.now().Before(d.cert.renewAt) {
		return d.state(o.clock.now())
	}
	switch {
	case ctx.Err() != nil:
		return d.state(o.clock.now())
	case d.nextAttempt != nil && o.clock.now().Before(*d.nextAttempt):
		log.DebugContext(ctx, "due, but waiting before the next attempt", "next_attempt", *d.nextAttempt, "failures", d.failures)
		return d.state(o.clock.now())
	}
	if w, reason := o.throttle.left(); w > 0 {
		log.DebugContext(ctx, "due, but the renewer is paused", "reason", reason)
		return d.state(o.clock.now())
	}
	// The CA may have the order an earlier term left in flight. Finishing
	// it (answering its challenges, finalizing it, fetching and storing its
	// certificate) orders nothing new, and the CA moves an order through
	// its states once, so it need not wait for the lock-delay. It is tried
	// again after the lock-delay: an earlier term that was paused, not dead,
	// may have noted where the CA has its order meanwhile.
	recovered := func() bool { return d.orderID != nil && o.finishUnfinished(ctx, d, replacesOf(d), log) }
	if recovered() {
		return d.state(o.clock.now())
	}
	delayed, err := o.gate.beforeOrder(ctx)
	if err != nil || delayed && recovered() {
		return d.state(o.clock.now())
	}
	o.order(ctx, d, log)
	return d.state(o.clock.now())
}

// checkARI asks the CA for the certificate's renewal window (RFC 9773) and,
// when the window is new, picks the renewal instant inside it.
func (o *orderer) checkARI(ctx context.Context, d *domain, log *slog.Logger) {
	c := d.cert
	octx, obs := observe(ctx, nil)
	info, err := o.ca.renewalInfo(octx, c.leaf)
	if ctx.Err() != nil {
		return
	}
	var next time.Duration
	renewAt, start, end := c.renewAt, c.ariStart, c.ariEnd
	switch {
	case errors.Is(err, api.ErrNoARI):
		next = ariDefault
		start, end = nil, nil
		renewAt = FallbackRenewAt(c.notBefore, c.notAfter, o.opts.RenewFraction, o.opts.ShortRenewFraction, o.opts.ShortLifetime)
	case err != nil:
		f := classify(err, obs)
		o.m.failures.WithLabelValues(o.job, ReasonARI).Inc()
		log.WarnContext(ctx, "renewal info (ARI) check failed; keeping the current renewal instant", "reason", f.reason, "err", err)
		o.throttle.failed(ctx, f, d.name)
		next = ariAfterFailure
	default:
		ws, we := info.SuggestedWindow.Start, info.SuggestedWindow.End
		if start == nil || end == nil || !start.Equal(ws) || !end.Equal(we) {
			renewAt = pickInWindow(ws, we, lastSafeRenewal(c.notBefore, c.notAfter))
			log.InfoContext(ctx, "renewal window from the CA", "window_start", ws, "window_end", we, "renew_at", renewAt)
		}
		start, end = &ws, &we
		next = ariRecheck(info.RetryAfter)
	}
	if err := o.store.storeWindow(ctx, c, start, end, renewAt, next); err != nil {
		o.stop.checkStale(err)
		log.WarnContext(ctx, "could not store the renewal window", "err", err)
	}
}

// order asks the CA for a certificate for d: the order is recorded in flight
// (fenced) before the first request, so that a successor finds it; then the
// result is stored or the failure recorded, both fenced.
func (o *orderer) order(ctx context.Context, d *domain, log *slog.Logger) {
	replaces := replacesOf(d)
	orderID, key, err := o.store.beginOrder(ctx, d, replaces, log)
	switch {
	case errors.Is(err, errBudget):
		return
	case err != nil:
		o.stop.checkStale(err)
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
		o.m.alreadyReplaced.WithLabelValues(o.job).Add(float64(conflicts))
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
func (o *orderer) obtain(ctx context.Context, d *domain, orderID int64, key crypto.Signer, replaces string,
	log *slog.Logger) (*certificate.Resource, *observation, error) {
	octx, obs := observe(ctx, func(orderURL, certURL string) { o.store.recordURLs(ctx, d, orderID, orderURL, certURL, log) })
	res, err := o.ca.obtain(octx, certificate.ObtainRequest{
		Domains:        []string{d.name},
		PrivateKey:     key,
		Bundle:         true,
		Profile:        o.opts.Profile,
		ReplacesCertID: replaces,
	})
	return res, obs, err
}

// keep stores the certificate issued to order orderID; one that does not
// match the order counts as the order's failure.
func (o *orderer) keep(ctx context.Context, d *domain, orderID int64, res *certificate.Resource, key crypto.Signer,
	replaces string, conflict bool, log *slog.Logger) {
	if err := o.store.storeCert(ctx, d, orderID, res, key, replaces, conflict, log); err != nil {
		o.stop.checkStale(err)
		if errors.Is(err, errBadCertificate) {
			o.failed(ctx, d, orderID, failure{reason: ReasonCertificate, counts: true, err: err}, log)
			return
		}
		log.ErrorContext(ctx, "could not store the certificate", "order_id", orderID, "err", err)
	}
}

// failed records a failed order: the domain backs off (or waits for the
// CA's Retry-After), and a 503 pauses the whole renewer.
func (o *orderer) failed(ctx context.Context, d *domain, orderID int64, f failure, log *slog.Logger) {
	o.m.orders.WithLabelValues(o.job, "failed").Inc()
	o.m.failures.WithLabelValues(o.job, f.reason).Inc()
	failures := d.failures
	if f.counts {
		failures++
	}
	wait := retryWait(f, failures, o.opts.UnavailablePause)
	o.throttle.failed(ctx, f, d.name)
	if err := o.store.recordFailure(ctx, d, orderID, f, failures, wait); err != nil {
		o.stop.checkStale(err)
		log.ErrorContext(ctx, "could not record the failed order", "err", err)
		return
	}
	log.WarnContext(ctx, "order failed", "order_id", orderID, "reason", f.reason, "failures", failures,
		"next_attempt_in", wait.Round(time.Second), "err", f.err)
}
