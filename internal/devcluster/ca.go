package devcluster

import (
	"context"
	"log/slog"
)

// acmeCA is an ACME test CA with its DNS, in this process, for the demo's
// certificate renewer: what its options need.
type acmeCA struct {
	// Directory is the CA's ACME directory URL (https).
	Directory string
	// RootsFile is a PEM file of the roots that sign the CA's own TLS
	// certificate (the renewer's ca_roots_file).
	RootsFile string
	// KeyFile holds the key that seals certificate keys (key_file: one
	// base64 line of 32 bytes).
	KeyFile string

	close func()
}

// startCA is the seam for the in-process ACME test CA: Pebble (Let's
// Encrypt's test CA) with challtestsrv as its DNS, every name resolving to
// 127.0.0.1, and the validation authority's HTTP-01 connections forwarded to
// the instances' challenge listeners, challenge (one 127.0.0.1:port per
// instance, in order; empty when the certrenew type is not built in). dir is
// the cluster's folder, for the roots and key files.
//
// It returns nil (no CA) until that is wired in; the renewer's demo entry is
// left out meanwhile, and joins the demo as soon as this returns a CA and the
// certrenew type is registered. internal/acmetest (added with the
// fault-injection harness) does the Pebble part: acmetest.Start(dir), then
// Route(challenge...); what is left is writing a fresh sealing key to
// KeyFile.
func startCA(ctx context.Context, dir string, challenge []string, log *slog.Logger) (*acmeCA, error) {
	_, _, _, _ = ctx, dir, challenge, log
	return nil, nil
}

func (ca *acmeCA) Close() {
	if ca != nil && ca.close != nil {
		ca.close()
	}
}
