package certserve_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/testbench/certtest"
)

// webTier is Snip's web tier as a Go server: port 80 answers the short links
// and, mounted beside them, the CA's HTTP-01 requests; port 443 serves the
// short links over TLS with the renewer's certificates, from memory.
type webTier struct {
	http80, https string
}

func startWebTier(t *testing.T, r *certtest.Renewer) (*webTier, *certserve.Certificates) {
	t.Helper()
	app := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, "https://example.com/launch-video", http.StatusFound) // a short link
	})
	mux := http.NewServeMux()
	mux.Handle("/", app)
	mux.Handle(certserve.ChallengePath, r.Challenges("web tier challenges"))
	certs := r.Certificates("web tier certificates")

	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: certs.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &webTier{http80: certtest.ServeHTTP(t, mux), https: ln.Addr().String()}, certs
}

// get asks the web tier's TLS port for https://domain/abc, trusting only
// the CA's root, and returns the serial of the certificate it was shown.
func (w *webTier) get(t *testing.T, roots *x509.CertPool, domain string) (serial string, err error) {
	t.Helper()
	client := &http.Client{
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, w.https)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Get("https://" + domain + "/abc")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusFound {
		t.Errorf("https://%s/abc: %d, want the short link's redirect", domain, resp.StatusCode)
	}
	return hex.EncodeToString(resp.TLS.PeerCertificates[0].SerialNumber.Bytes()), nil
}

func TestTheWebTierServesWhatTheRenewerStoresAndAnswersItsChallengesBesideTheShortLinks(t *testing.T) {
	r := certtest.Start(t, nil)
	web, certs := startWebTier(t, r)
	r.Route(web.http80) // the CA's HTTP-01 validation reaches the web tier's port 80
	r.AddDomains("shop.test", "blog.test")
	r.Pass()

	roots := r.CA.IssuerRoots()
	for _, d := range []string{"shop.test", "blog.test"} {
		want := r.Serial(d)
		waitServed(t, certs, d, want)
		if got, err := web.get(t, roots, d); err != nil || got != want {
			t.Errorf("https://%s: serial %q, %v; want the stored %q", d, got, err, want)
		}
	}
	if _, err := web.get(t, roots, "unknown.test"); err == nil {
		t.Errorf("a name without a certificate got a TLS session")
	}
	// The short links on port 80 are untouched by the challenge mount.
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).
		Get("http://" + web.http80 + "/abc")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Errorf("a short link on port 80: %d, want its redirect", resp.StatusCode)
	}

	// A renewal is served by the running server.
	old := r.Serial("shop.test")
	r.DueNow("shop.test")
	r.Pass()
	renewed := r.Serial("shop.test")
	if renewed == old {
		t.Fatalf("the renewal stored no new certificate")
	}
	waitServed(t, certs, "shop.test", renewed)
	if got, err := web.get(t, roots, "shop.test"); err != nil || got != renewed {
		t.Errorf("after the renewal: serial %q, %v; want %q", got, err, renewed)
	}
}
