package devcluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/snip/snip-jobs/testbench/acmetest"
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
	// Profile is the ACME profile the CA offers.
	Profile string
	// IssuerRootFile holds the root the CA issues under (PEM): what a client
	// of the demo's HTTPS trusts.
	IssuerRootFile string

	close func()
	route func(addrs ...string)
}

// routeChallenges points the CA's validations at the challenge listeners of
// the instances whose process runs, as a load balancer's health check would:
// the port of an exited instance is still bound (the supervisor holds it), so
// a validation sent there would wait instead of being refused and tried on
// the next instance.
func (c *Cluster) routeChallenges() {
	if c.ca == nil || c.ca.route == nil {
		return
	}
	c.routeMu.Lock() // the last to run reads the latest states
	defer c.routeMu.Unlock()
	var addrs []string
	for _, ch := range c.children {
		if ch.challenge != "" && ch.info().State != stateExited {
			addrs = append(addrs, ch.challenge)
		}
	}
	c.ca.route(addrs...)
}

// startCA starts the in-process ACME test CA: Pebble (Let's Encrypt's test
// CA) with challtestsrv as its DNS, every name resolving to 127.0.0.1, and the
// validation authority's HTTP-01 connections forwarded to the instances'
// challenge listeners, challenge (one 127.0.0.1:port per instance, in order;
// empty when the certrenew type is not built in, and then there is no CA). dir
// is the cluster's folder, for the roots and key files.
func startCA(_ context.Context, dir string, challenge []string, log *slog.Logger) (*acmeCA, error) {
	if len(challenge) == 0 {
		return nil, nil
	}
	ca, err := acmetest.Start(dir)
	if err != nil {
		return nil, fmt.Errorf("the ACME test CA: %w", err)
	}
	ca.Route(challenge...)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		ca.Close()
		return nil, err
	}
	keyFile := filepath.Join(dir, "certificate-keys")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		ca.Close()
		return nil, err
	}
	log.Debug("ACME test CA up", "directory", ca.DirectoryURL)
	return &acmeCA{Directory: ca.DirectoryURL, RootsFile: ca.RootsFile, KeyFile: keyFile, Profile: acmetest.Profile,
		IssuerRootFile: ca.IssuerRootFile, close: ca.Close, route: ca.Route}, nil
}

func (ca *acmeCA) Close() {
	if ca != nil && ca.close != nil {
		ca.close()
	}
}
