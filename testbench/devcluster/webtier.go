package devcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
)

// webTier stands in for Snip's web tier: an HTTPS server answering the
// demo's custom domains with the certificates the renewer stored, from
// memory (certserve), as the real one would. Its page names the certificate
// it was served with, so a renewal shows.
type webTier struct {
	addr string
	srv  *http.Server
	stop context.CancelFunc
	done chan struct{}
}

// startWebTier serves on 127.0.0.1:port (a free port for 0, or if that one
// is taken) with the certificates in the database at dbURL, opening their keys
// with the key file the renewer seals them with.
func startWebTier(dbURL, keyFile string, port int, log *slog.Logger) (*webTier, error) {
	data, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("web tier: %w", err)
	}
	keys, err := keyring.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("web tier: %s: %w", keyFile, err)
	}
	db, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("web tier: the database URL: %w", err)
	}
	db.RuntimeParams["application_name"] = "snip-dev web tier"
	src, err := certserve.NewCertificates(certserve.Config{DB: db, Log: log.With("component", "web tier")}, keys)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return nil, fmt.Errorf("web tier: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	w := &webTier{addr: ln.Addr().String(), stop: stop, done: make(chan struct{})}
	w.srv = &http.Server{Handler: http.HandlerFunc(page(src)), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{GetCertificate: src.GetCertificate}, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() {
		defer close(w.done)
		_ = src.Run(ctx)
	}()
	go func() {
		if err := w.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("the dev web tier stopped", "err", err)
		}
	}()
	return w, nil
}

// page says which certificate the request came in with.
func page(src *certserve.Certificates) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		crt, ok := src.Lookup(r.TLS.ServerName)
		if !ok {
			http.Error(w, "no certificate for "+r.TLS.ServerName, http.StatusMisdirectedRequest)
			return
		}
		fmt.Fprintf(w, "Snip's web tier (snip-dev): %s, served with certificate %s (not after %s), from memory\n",
			crt.Domain, crt.Serial, crt.NotAfter.UTC().Format(time.RFC3339))
	}
}

func (w *webTier) close() {
	if w == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = w.srv.Shutdown(ctx)
	w.stop()
	<-w.done
}
