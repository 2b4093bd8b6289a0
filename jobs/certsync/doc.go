// Package certsync is the certsync job type: on every server, it keeps a
// directory of certificate files in sync with the certificates the renewer
// (package certrenew) stores, for TLS servers that are not Go (nginx,
// HAProxy). A Go server uses certserve.Certificates directly instead.
//
// The job runs everywhere (never a singleton: each server keeps its own
// directory) and continuously. It reads the certificates with a
// certserve.Certificates of its own (one PostgreSQL connection, kept current
// by LISTEN/NOTIFY) and, after each batch of changes (the changes that arrive
// within Settle of the first), makes the directory match: one file per
// domain, <domain>.pem, holding the chain (leaf first) then the private key,
// written atomically; files of domains without a current certificate are
// removed; then the configured reload command runs once.
//
// What is guaranteed:
//   - A file is always whole: it is written to a temporary file in the
//     directory's .certsync/ subdirectory (mode 0600, or 0640 and the
//     configured group, set before the key is written), fsynced, then
//     renamed over <domain>.pem. A failed write leaves the old file and no
//     temporary file. The chain and key are one file, so they are replaced
//     together (docs/certrenew.md, "Serving the certificates").
//   - Nothing is written before the first full read of the certificates, and
//     a file is removed only when PostgreSQL has no current certificate for
//     its domain: a keyring that cannot open the keys removes nothing.
//   - A change is never lost: a failed write, removal or reload is logged
//     (with job, instance, the path or the command), counted, and retried at
//     the next batch or after a back-off; a reload owed when the process
//     stops is recorded in .certsync/reload-pending and run at the next
//     start.
//   - Only names that are safe file names (lower-case letters, digits,
//     hyphens, dots between labels) are written; any other is logged with
//     the domain and skipped.
//   - The reload command never gets the service's environment (the
//     database URL, key_env's variable, the etcd password, tokens): its
//     whole environment is PATH, LANG and LC_ALL if the service has them,
//     SNIP_CERTSYNC_DIR and SNIP_CERTSYNC_JOB (reload.go, childEnv). Its
//     output is logged only when it fails, cut at 4 KiB, with every secret
//     value the job knows and whatever looks like one (a URL's userinfo,
//     NAME=value for a secret-looking NAME, a PEM private key) replaced by
//     [REDACTED] (redact.go); so are its arguments wherever they are logged.
//   - No link is followed where the job writes or removes: the directory
//     and its .certsync/ are each opened once per pass with O_NOFOLLOW and
//     every file operation is relative to them (dir.go). Each must be owned
//     by the service's user and writable by it alone: a link in place of
//     either, a directory of another user, or one its group or others may
//     write in (mode 0777, 0770, ...) is refused with an error naming it,
//     its mode and the fix; nothing is read, written or removed and no
//     reload runs until it is fixed. Their parents are not checked: a
//     private directory under a sticky /tmp is fine.
//
// What is NOT guaranteed:
//   - That a server reading the files sees each change at once: nginx with
//     $ssl_server_name reads the file at every full handshake, HAProxy only
//     when reloaded.
//   - That nginx never mixes two versions: it opens the file twice per
//     handshake (chain, then key), so a rename landing between the two opens
//     fails that one handshake (the pair does not match; nothing wrong is
//     served).
//   - Anything about files it does not manage: the directory is dedicated to
//     one certsync job; every <name>.pem in it whose name is a safe file name
//     is treated as its own.
package certsync
