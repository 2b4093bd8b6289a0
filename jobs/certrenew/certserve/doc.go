// Package certserve serves what the certificate renewer (package certrenew)
// stores in PostgreSQL, from memory: certificates to TLS servers
// (Certificates.GetCertificate for a tls.Config, or, for a server that is not
// Go, files: package jobs/certsync) and HTTP-01 key authorizations to the ACME
// CA (Challenges, an http.Handler for /.well-known/acme-challenge/). It needs
// no leadership and no etcd: Snip's web tier imports it, and every snip-jobs
// instance uses it.
//
// Each reader holds one PostgreSQL connection of its own (never a pool's, so
// it can neither take nor be starved of the jobs' connections), LISTENs on a
// channel that a trigger notifies when the renewer's transaction commits
// (migration 0011), reads everything once, then applies each notification.
// A handshake or a challenge request never queries the database.
//
// What is guaranteed:
//   - Once Ready, a certificate committed by the renewer is served after its
//     notification arrives and one read of its row; nothing is served that
//     PostgreSQL did not hold as current at some point.
//   - Private keys are opened once per certificate, when it is loaded; a key
//     that does not open (a sealing key missing from the keyring) is logged
//     with its domain and skipped, and the rest are served.
//   - A name without a current certificate fails the handshake at once
//     (*UnknownNameError), whatever the number of such handshakes.
//   - After a dropped connection the reader reconnects (with back-off) and
//     reads everything again, since a notification sent while it was not
//     listening is lost; it also reads everything every Resync.
//
// What is NOT guaranteed:
//   - Freshness while PostgreSQL is unreachable: the last certificates and
//     tokens read are served until it answers again (certificates stay valid
//     until their not-after; a challenge token until its expiry).
//   - That a token the CA asks for has arrived yet: the CA is told to validate
//     only after the token committed, but its request can overtake the
//     notification. A request for a token not in memory waits up to MissWait
//     for it (at most MaxWaiters requests wait at once; the others are
//     answered 404 at once), so a race costs milliseconds, not an order.
//   - An answer about a token before the pending tokens were first read. A
//     request that arrives sooner (just after a restart) waits for that read
//     up to LoadWait (2 s); if PostgreSQL has not answered since the start,
//     it is answered 503 with Retry-After, at once once the wait is over,
//     however long the database stays silent (before, the request waited
//     for it, past the CA's own timeout: Pebble's is 15 s). A CA fails the
//     challenge on any answer but 200 (RFC 8555 §8.3; Pebble: "Non-200
//     status code"), and does not retry it on 503 nor read Retry-After, so
//     the status does not save that order; but 503 is what is true — this
//     server cannot tell — where 404 would say the token does not exist:
//     the CA's error (which the renewer stores, and `certs list --failing`
//     shows) then points at this server's database rather than at the token
//     or DNS, a proxy in front of several servers may try another on 503
//     (nginx: proxy_next_upstream http_503), and nothing caches it.
package certserve
