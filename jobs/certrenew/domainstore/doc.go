// Package domainstore is the certificate renewer's memory of each wanted
// custom domain, kept in PostgreSQL: which names can get a certificate
// (NormalizeDomain, CheckPublicTLD; the others recorded with their reason),
// the order in flight with its sealed key, the back-off, the operators'
// retry and renewal requests, and the current certificate with its renewal
// instant (FallbackRenewAt, or the CA's window). A Store serves one pass;
// the pass's Clock is the database's.
//
// What is guaranteed: every write for a domain is fenced by the run's token
// and shows in the Domain only once committed; an order is recorded, with
// its key and within the order budget (counted in PostgreSQL across terms),
// before it may be sent; a certificate is made current only if it is for the
// name, with the order's key, and has sane dates (ErrBadCertificate).
//
// What is not: it never talks to the CA (package acmeflow does), and the CA's
// URLs of an order (RecordURLs) are noted outside the fence, even after the
// term ended: they only say where to look.
package domainstore
