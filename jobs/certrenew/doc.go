// Package certrenew keeps one current TLS certificate for every custom domain
// of Snip's customers: a singleton interval job (type "certrenew", by default
// hourly with jitter) that orders and renews certificates from an ACME CA
// with lego v5, and the HTTP-01 handler every instance serves.
//
// Each pass reads custom_domains (rows whose status is wanted), refuses names
// that cannot get a certificate (domainstore.NormalizeDomain; recorded with
// a reason in certrenew_invalid_domains), and for each valid name refreshes the CA's
// renewal window (ARI, RFC 9773) when due, then orders a certificate when the
// name has none or its renewal instant has come: a point picked inside the
// ARI window, otherwise 2/3 of the lifetime (1/2 for 10 days or less).
// Renewals send "replaces". One ACME account serves every instance: its key
// is stored sealed in PostgreSQL before it is registered. HTTP-01 tokens go
// to a shared table; every instance serves them from memory for the matching
// Host only (package certserve, which also serves the certificates to TLS
// servers). Private keys are sealed with AES-256-GCM (package keyring);
// Current reads one certificate (the CLI's view; TLS servers use certserve).
//
// What is guaranteed:
//   - At most one current certificate per name (a unique index), and it was
//     stored by a transaction fenced with the run's token: once a newer term
//     has written anything for the job, an older term's store is refused
//     (*fencing.StaleTokenError) and the pass stops.
//   - Every CA request is bound to the term's context, including the
//     directory fetch lego makes with context.Background().
//   - An order is recorded (fenced) before the first request to the CA: the
//     domain, the term, the certificate key (sealed) and the "replaces". A
//     successor finds it and finishes that order at the CA when the CA has
//     it (answers its challenges, finalizes it with the sealed key, or
//     fetches what it issued: none of which orders anew), or else orders
//     again with the same key; it never orders while an earlier term may
//     still be talking to the CA: if that term ended in the middle of a pass
//     without marking itself idle (expiry, crash), no order is placed until
//     lock_delay after it was last seen alive.
//   - Orders in any 3 hours never exceed order_budget, counted in PostgreSQL
//     across terms and instances; at most concurrency orders are in flight.
//   - A failing domain backs off (1 m, 10 m, 100 m, then daily); a rate
//     limit's Retry-After is honoured for the domain; a 503 (or an
//     account-wide rate limit) pauses every CA request, for this leader and
//     the next. None of these stops the other domains.
//
// What is NOT guaranteed:
//   - That the CA issues one certificate per order. The CA cannot check a
//     fencing token: a leader paused in the middle of an order can still
//     finalize it after its successor ordered again, and the CA then issues
//     twice (the duplicate is never stored). The lock-delay makes this need
//     a pause longer than lock_delay; the fence makes it harmless for
//     PostgreSQL.
//   - That a renewal counts as an ARI renewal. If the CA already holds a
//     replacement of the certificate (an order an earlier term finalized but
//     never stored), it answers 409 alreadyReplaced and lego silently orders
//     again without "replaces". The renewer detects this, counts it
//     (snip_certrenew_already_replaced_total) and marks the certificate
//     (ari_conflict), but the order counts against the CA's rate limits.
//   - Anything for names that are not on port 80 of an instance: HTTP-01
//     needs the CA to reach a challenge listener. DNS-01 is a seam only
//     (acmeflow.DNS01Provider); wildcards are refused.
//   - That the order log's budget matches the CA's: it counts every order,
//     renewals included, and cannot see orders made with the account by
//     anything else.
//
// The rooms: this package is the job's glue (the type, the pass, its term
// and lock-delay, the options, the metrics, the operators' commands);
// acmeflow talks to the CA; domainstore keeps the domains' state; keyring
// seals keys; certserve serves certificates and tokens. Data flows one way:
// certrenew → acmeflow → domainstore.
//
// One certrenew job per database: the tables are not keyed by job, and the
// fencing resource is the job's name. docs/certrenew.md has the design, the
// operations (key rotation, metrics) and the limits.
package certrenew
