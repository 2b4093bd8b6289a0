package etcdtest

import (
	"context"
	"net/http"
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

// Metrics scrapes member i's /metrics, served on its client URL (over TLS
// with the test's client certificate for a member of StartSecure): what
// the etcd server itself counted. Members embedded in one process count into
// one registry: the figures are those of every member in the process, this
// cluster's only while no other runs (a test that counts must not be
// parallel).
func (c *Cluster) Metrics(t testing.TB, i int) benchtest.Metrics {
	t.Helper()
	hc := http.DefaultClient
	if pki := c.member(i).tls; pki != nil {
		tc, err := transport.TLSInfo{CertFile: pki.ClientCert, KeyFile: pki.ClientKey, TrustedCAFile: pki.CA}.ClientConfig()
		if err != nil {
			t.Fatalf("etcdtest: Metrics: %v", err)
		}
		hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	}
	m, err := benchtest.ScrapeMetricsWith(context.Background(), hc, c.Endpoint(i))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
