// Package acmeflow is the certificate renewer's conversation with the ACME
// CA (lego v5) during one pass: the shared account (its key stored sealed
// before the CA hears of it), the session bound to the term, and the
// Orderer that refreshes a domain's renewal window (ARI) and orders, or
// finishes the order an earlier term left, recording everything through a
// domainstore.Store. HTTP-01 tokens go to the shared table (certserve serves
// them); DNS01Provider is the DNS-01 seam.
//
// What is guaranteed: no request leaves once the term has ended (lego's own
// with context.Background() included); no order is placed while the
// renewer is paused (a 503 or an account-wide rate limit, recorded for the
// next leader), while the domain backs off, past the budget, or before the
// Gate opens; a certificate the CA issued to an unfinished order is fetched
// and stored, not ordered again. Every failure is classified (Reason*) and
// backs off (Backoff) or waits for the CA's Retry-After.
//
// What is not: that the CA issues once per order (a term paused mid-order may
// still finalize it), nor that a renewal counts as an ARI one (409
// alreadyReplaced; counted). See package certrenew's comment.
package acmeflow
