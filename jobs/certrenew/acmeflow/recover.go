package acmeflow

import (
	"context"
	"crypto"
	"errors"
	"log/slog"

	"github.com/go-acme/lego/v5/acme"
	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/jobs/certrenew/domainstore"
)

// finishUnfinished finishes the unfinished order d has in flight
// (d.OrderID) at the CA: one an earlier term left, or this term's whose lego
// call failed after the CA accepted the CSR. It takes the certificate's URL
// the transport noted, or asks the CA about the order at the URL it noted —
// answering its challenges if it is pending, finalizing it if it is ready —
// then fetches the certificate and stores it. It reports whether the domain
// is dealt with for this pass (stored, this term's store refused, or the
// order's failure recorded); false means: order as usual.
func (o *Orderer) finishUnfinished(ctx context.Context, d *domainstore.Domain, replaces string, log *slog.Logger) bool {
	orderID := *d.OrderID
	orderURL, certURL, token, err := o.store.RecordedURLs(ctx, orderID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false
	case err != nil:
		if ctx.Err() == nil {
			log.WarnContext(ctx, "could not look up the CA's URLs of an unfinished order (it will be ordered again)", "unfinished_order_id", orderID, "err", err)
		}
		return ctx.Err() != nil
	}
	log = log.With("unfinished_order_id", orderID, "unfinished_order_token", token)
	var url string
	if certURL != nil {
		url = *certURL
	}
	if url == "" && orderURL == nil {
		return false
	}
	key, err := o.store.OpenOrderKey(d)
	if err != nil {
		log.WarnContext(ctx, "the unfinished order's key does not open (it will be ordered again)", "err", err)
		return false
	}
	if url == "" {
		var dealt bool
		if url, dealt = o.finishAtCA(ctx, d, orderID, *orderURL, key, log); url == "" {
			return dealt
		}
	}
	return o.fetchAndStore(ctx, d, orderID, url, key, replaces, log)
}

// fetchAndStore fetches the certificate the CA issued to the unfinished
// order orderID, at url, and stores it; it reports as finishUnfinished.
func (o *Orderer) fetchAndStore(ctx context.Context, d *domainstore.Domain, orderID int64, url string, key crypto.Signer,
	replaces string, log *slog.Logger) bool {
	res, err := o.ca.certificate(ctx, url)
	if err != nil {
		if ctx.Err() == nil {
			log.WarnContext(ctx, "could not fetch the certificate issued to an unfinished order (it will be ordered again)", "url", url, "err", err)
		}
		return ctx.Err() != nil
	}
	if err := o.store.StoreCert(ctx, d, orderID, res, key, replaces, false, log); err != nil {
		o.stale(err)
		if errors.Is(err, domainstore.ErrBadCertificate) {
			log.WarnContext(ctx, "the certificate issued to an unfinished order does not match it (it will be ordered again)", "url", url, "err", err)
			return false
		}
		log.ErrorContext(ctx, "could not store the certificate issued to an unfinished order", "err", err)
		return true
	}
	o.m.Recovered.WithLabelValues(o.job).Inc()
	log.InfoContext(ctx, "stored the certificate the CA issued to an unfinished order, without ordering again")
	return true
}

// finishAtCA moves the unfinished order at orderURL on at the CA until it is
// issued — answering its challenges if it is pending, finalizing it with key
// if it is ready — and returns its certificate's URL. Without one, dealt
// says whether the domain is dealt with for this pass (as finishUnfinished).
func (o *Orderer) finishAtCA(ctx context.Context, d *domainstore.Domain, orderID int64, orderURL string, key crypto.Signer,
	log *slog.Logger) (certURL string, dealt bool) {
	ord, err := o.ca.askOrder(ctx, orderURL)
	if err == nil && ord.Status == acme.StatusPending {
		// Not validated yet: answer its challenges. The order exists
		// already, so this orders nothing and needs no lock-delay: if
		// the term that placed it is only paused, its own challenge
		// or finalize reaches a CA that has moved on, and is refused.
		log.InfoContext(ctx, "resuming an unfinished order: answering its challenges", "order_url", orderURL)
		octx, obs := observe(ctx, nil)
		if err := o.ca.solvePending(octx, ord); err != nil {
			if ctx.Err() != nil {
				return "", true
			}
			o.failed(ctx, d, orderID, classify(err, obs), log)
			return "", true
		}
		ord, err = o.ca.askOrder(ctx, orderURL)
	}
	if err == nil && ord.Status == acme.StatusReady {
		// Validated, never finalized: finish it with the order's own
		// key. The CA finalizes an order once, so this can never
		// make a second certificate, even if the term that ordered
		// it is paused on its way to finalize: its finalize is then
		// refused. That is why it needs no lock-delay either.
		log.InfoContext(ctx, "finalizing an unfinished order the CA had validated", "order_url", orderURL)
		ord, err = o.ca.finalizeReady(ctx, d.Name, orderURL, ord.Finalize, key)
	}
	switch {
	case err != nil:
		if ctx.Err() == nil {
			log.WarnContext(ctx, "could not finish an unfinished order (it will be ordered again)", "order_url", orderURL, "err", err)
		}
		return "", ctx.Err() != nil
	case ord.Certificate == "":
		log.InfoContext(ctx, "the CA has not issued an unfinished order (it will be ordered again)", "order_url", orderURL, "status", ord.Status)
		return "", false
	}
	return ord.Certificate, false
}
