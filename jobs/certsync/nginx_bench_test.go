package certsync_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

// BenchmarkNginxHandshakesWhileAFileIsReplaced measures what the layout of
// the files costs while they are replaced under nginx ($ssl_server_name:
// nginx opens the chain and the key at each handshake): clients handshake
// without pause while the certificate of their name is replaced b.N times
// (temporary file, fsync, rename, as certsync writes), alternately with two
// pairs. "two-files" is the usual layout (chain in .crt, key in .key, each
// renamed in turn); "combined" is certsync's (one .pem, chain then key).
// It reports the share of handshakes that failed (a key that does not match
// the chain nginx read); a renewal replaces a domain's file once in weeks.
//
//	go test ./jobs/certsync -run '^$' -bench NginxHandshakesWhileAFileIsReplaced -benchtime 2000x -count 3
func BenchmarkNginxHandshakesWhileAFileIsReplaced(b *testing.B) {
	base := b.TempDir()
	if os.Geteuid() == 0 {
		os.Chmod(filepath.Dir(base), 0o711)
		os.Chmod(base, 0o711)
	}
	dir := filepath.Join(base, "certs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	pairs := [2][2][]byte{selfSigned(b, "shop.test"), selfSigned(b, "shop.test")}
	layouts := []struct {
		name  string
		files func(chain, key []byte) map[string][]byte
		conf  string
	}{
		{"two-files", func(c, k []byte) map[string][]byte {
			return map[string][]byte{"shop.test.crt": c, "shop.test.key": k}
		}, "ssl_certificate %[1]s/$ssl_server_name.crt; ssl_certificate_key %[1]s/$ssl_server_name.key;"},
		{"combined", func(c, k []byte) map[string][]byte {
			return map[string][]byte{"shop.test.pem": append(append([]byte{}, c...), k...)}
		}, "ssl_certificate %[1]s/$ssl_server_name.pem; ssl_certificate_key %[1]s/$ssl_server_name.pem;"},
	}
	var lns []*net.TCPListener
	var servers, addrs []string
	for _, l := range layouts {
		ln := benchtest.Listen(b)
		lns, addrs = append(lns, ln), append(addrs, ln.Addr().String())
		servers = append(servers, fmt.Sprintf("server { listen %s ssl; %s return 200; }", ln.Addr(), fmt.Sprintf(l.conf, dir)))
		for name, data := range l.files(pairs[0][0], pairs[0][1]) {
			replace(b, dir, name, data)
		}
	}
	startNginx(b, base, fmt.Sprintln(servers[0], "\n", servers[1]), lns...)

	for i, l := range layouts {
		b.Run(l.name, func(b *testing.B) {
			var ok, failed atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						c, err := tls.DialWithDialer(&net.Dialer{Timeout: benchtest.Patience}, "tcp", addrs[i],
							&tls.Config{ServerName: "shop.test", InsecureSkipVerify: true})
						if err != nil {
							failed.Add(1)
							continue
						}
						c.Close()
						ok.Add(1)
					}
				})
			}
			start := time.Now()
			for n := range b.N {
				p := pairs[(n+1)%2]
				for _, name := range []string{"shop.test.crt", "shop.test.key", "shop.test.pem"} {
					if data, has := l.files(p[0], p[1])[name]; has {
						replace(b, dir, name, data)
					}
				}
			}
			elapsed := time.Since(start)
			close(stop)
			wg.Wait()
			total := ok.Load() + failed.Load()
			b.ReportMetric(100*float64(failed.Load())/float64(max(total, 1)), "%failed")
			b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/replacement")
			b.ReportMetric(float64(total)/elapsed.Seconds(), "handshakes/s")
		})
	}
}

// replace writes data to dir/name as certsync does: a temporary file,
// fsynced, renamed over it.
func replace(b *testing.B, dir, name string, data []byte) {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		b.Fatal(err)
	}
	f.Chmod(0o644)
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if err := os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		b.Fatal(err)
	}
}

// selfSigned is a certificate for name and its key, PEM.
func selfSigned(b *testing.B, name string) [2][]byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		DNSNames: []string{name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	return [2][]byte{pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})}
}
