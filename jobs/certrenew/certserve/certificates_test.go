package certserve_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/certtest"
)

func TestEveryCurrentCertificateIsServedFromMemoryWithoutAQueryPerHandshake(t *testing.T) {
	f := newFixture(t)
	shop, blog := f.store("shop.example.com", f.keys), f.store("blog.example.com", f.keys)
	src := f.certificates(f.keys)
	addr := tlsServer(t, src)

	before := f.readerQueries()
	if before == 0 {
		t.Fatal("pg_stat_statements counted no statement of the reader, not even its first read: the measurement is blind")
	}
	for i := 0; i < 500; i++ {
		for domain, want := range map[string]string{"shop.example.com": shop, "BLOG.example.com.": blog} {
			got, err := f.handshake(addr, domain)
			if err != nil || got != want {
				t.Fatalf("handshake %d for %s: serial %q, %v; want %q", i, domain, got, err, want)
			}
		}
		if _, err := f.handshake(addr, "unknown.example.com"); err == nil {
			t.Fatalf("handshake %d for a name without a certificate succeeded", i)
		}
	}
	if after := f.readerQueries(); after != before {
		t.Errorf("PostgreSQL ran %d reader statements during 1,500 handshakes, want 0", after-before)
	}
	var unknown *certserve.UnknownNameError
	if _, err := src.GetCertificate(&tls.ClientHelloInfo{}); !errors.As(err, &unknown) {
		t.Errorf("a handshake without SNI: %v, want *UnknownNameError", err)
	}
}

func TestARenewalCommittedIsServedWithoutRestartingAnything(t *testing.T) {
	f := newFixture(t)
	first := f.store("shop.example.com", f.keys)
	src := f.certificates(f.keys)
	addr := tlsServer(t, src)
	if got, err := f.handshake(addr, "shop.example.com"); err != nil || got != first {
		t.Fatalf("before the renewal: serial %q, %v; want %q", got, err, first)
	}

	renewed := f.store("shop.example.com", f.keys)
	waitServed(t, src, "shop.example.com", renewed)
	if got, err := f.handshake(addr, "shop.example.com"); err != nil || got != renewed {
		t.Errorf("after the renewal: serial %q, %v; want %q", got, err, renewed)
	}

	// A domain added later is served too; one whose current row goes is not.
	added := f.store("new.example.com", f.keys)
	waitServed(t, src, "new.example.com", added)
	changed := src.Changed()
	benchtest.Exec(t, f.pool, `DELETE FROM certrenew_certificates WHERE domain = 'shop.example.com'`)
	waitFor(t, "the deletion to be applied", changed)
	if _, ok := src.Lookup("shop.example.com"); ok {
		t.Errorf("a domain without a current certificate is still served")
	}
}

func TestAKeyThatCannotBeOpenedIsLoggedWithItsDomainAndTheRestAreServed(t *testing.T) {
	f := newFixture(t)
	other := newKeyring(t) // a sealing key this source does not hold
	good := f.store("good.example.com", f.keys)
	f.store("lost.example.com", other)

	var logged bytes.Buffer
	var mu sync.Mutex
	cfg := f.config()
	cfg.Log = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
	src, err := certserve.NewCertificates(cfg, f.keys)
	if err != nil {
		t.Fatal(err)
	}
	certtest.Run(t, src.Run, src.Ready())

	if crt, ok := src.Lookup("good.example.com"); !ok || crt.Serial != good {
		t.Errorf("good.example.com not served after another domain's key failed to open")
	}
	if _, ok := src.Lookup("lost.example.com"); ok {
		t.Errorf("lost.example.com served although its key cannot be opened")
	}
	mu.Lock()
	line := logged.String()
	mu.Unlock()
	if !strings.Contains(line, "domain=lost.example.com") || !strings.Contains(line, "certificate skipped") {
		t.Errorf("the log does not name the domain whose key failed:\n%s", line)
	}

	// Renewed with a key it can open, the domain is served again.
	renewed := f.store("lost.example.com", f.keys)
	waitServed(t, src, "lost.example.com", renewed)
}

func TestAfterADroppedConnectionTheSourceReadsEverythingAgain(t *testing.T) {
	f := newFixture(t)
	f.store("shop.example.com", f.keys)
	src := f.certificates(f.keys)

	// A change nobody is told of (triggers off for the writer: as if the
	// notification were lost), then the reader's connection is cut: only
	// the full read on reconnection can find the change.
	renewed := f.storeSilently("shop.example.com")
	benchtest.Exec(t, f.pool, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'certserve test'`)
	waitServed(t, src, "shop.example.com", renewed)
}

func TestTheFullReadEveryResyncFindsWhatNoNotificationSaid(t *testing.T) {
	f := newFixture(t)
	f.store("shop.example.com", f.keys)
	cfg := f.config()
	cfg.Resync = 100 * time.Millisecond
	src, err := certserve.NewCertificates(cfg, f.keys)
	if err != nil {
		t.Fatal(err)
	}
	certtest.Run(t, src.Run, src.Ready())

	renewed := f.storeSilently("shop.example.com")
	waitServed(t, src, "shop.example.com", renewed)
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
