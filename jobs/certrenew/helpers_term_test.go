package certrenew_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
)

// term is one instance leading the job with a token. Kill ends it the way
// expiry or a crash does: the term is no longer valid and its context ends.
type term struct {
	c     *cluster
	in    *instance
	token int64
	valid atomic.Bool
	ctx   context.Context
	stop  context.CancelFunc
}

func (c *cluster) lead(instance string, token int64) *term {
	in := c.inst[instance]
	ctx, stop := context.WithCancel(context.Background())
	c.t.Cleanup(stop)
	tm := &term{c: c, in: in, token: token, ctx: ctx, stop: stop}
	tm.valid.Store(true)
	return tm
}

func (tm *term) run() *scheduler.Run {
	return scheduler.NewRun(scheduler.RunConfig{
		Job: jobName, Instance: tm.in.name, Token: tm.token,
		Fence: fencing.New(tm.c.svc, tm.in.name),
		Valid: tm.valid.Load,
		Log:   tm.c.logger(),
	})
}

// pass runs one pass of the job in this term.
func (tm *term) pass() error { return tm.in.job.Run(tm.ctx, tm.run()) }

func (tm *term) mustPass() {
	tm.c.t.Helper()
	if err := tm.pass(); err != nil {
		tm.c.t.Fatalf("pass of %s (token %d): %v", tm.in.name, tm.token, err)
	}
}

// pauseInPass starts a pass of instance's term with token and holds its
// first request of kind (caEvent.Kind) at the CA, before Pebble sees it: a
// leader paused in the middle of that request, still believing it leads.
// It returns once the request is held; resume lets it go on and returns
// what the pass returned.
func (c *cluster) pauseInPass(instance string, token int64, kind string) (resume func() error) {
	c.t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	c.ca.setHook(func(ev *caEvent, _ http.ResponseWriter, pebble func()) {
		if ev.Kind == kind {
			isFirst := false
			first.Do(func() { isFirst = true }) // returns at once for the others
			if isFirst {
				close(held)
				<-release
			}
		}
		pebble()
	})
	tm := c.lead(instance, token)
	done := make(chan error, 1)
	go func() { done <- tm.pass() }()
	<-held
	return func() error {
		close(release)
		return <-done
	}
}

// killLeaderAt runs a pass of instance's term with token and kills the term
// (without handing over) as its first request of kind for domain reaches the
// CA, which never takes that request (500). The pass must end cancelled.
func (c *cluster) killLeaderAt(instance string, token int64, kind, domain string) {
	c.t.Helper()
	leader := c.lead(instance, token)
	c.ca.setHook(func(ev *caEvent, w http.ResponseWriter, pebble func()) {
		if ev.Kind == kind && len(ev.Domains) > 0 && ev.Domains[0] == domain {
			leader.kill()
			problem(w, http.StatusInternalServerError, "urn:ietf:params:acme:error:serverInternal", "lost", "")
			return
		}
		pebble()
	})
	defer c.ca.setHook(nil)
	if err := leader.pass(); !errors.Is(err, context.Canceled) {
		c.t.Fatalf("killed leader's pass: %v, want context.Canceled", err)
	}
}

// kill ends the term without handing over.
func (tm *term) kill() {
	tm.valid.Store(false)
	tm.stop()
}

// addDomains adds custom domains with a status, as the main app does.
func (c *cluster) addDomains(status string, domains ...string) {
	c.t.Helper()
	for _, d := range domains {
		c.exec(`INSERT INTO custom_domains (domain, status) VALUES ($1, $2)`, d, status)
	}
}

func (c *cluster) exec(sql string, args ...any) {
	c.t.Helper()
	benchtest.Exec(c.t, c.pool, sql, args...)
}

func (c *cluster) int(sql string, args ...any) int64 {
	c.t.Helper()
	return benchtest.Value[int64](c.t, c.pool, sql, args...)
}

func (c *cluster) str(sql string, args ...any) string {
	c.t.Helper()
	return benchtest.Value[string](c.t, c.pool, sql, args...)
}

func (c *cluster) time(sql string, args ...any) time.Time {
	c.t.Helper()
	return benchtest.Value[time.Time](c.t, c.pool, sql, args...)
}

// current returns the current certificate of domain, opened with the
// configured keys.
func (c *cluster) current(domain string) *certrenew.Certificate {
	c.t.Helper()
	crt, err := certrenew.Current(context.Background(), c.svc, c.keys, domain)
	if err != nil {
		c.t.Fatalf("current certificate of %s: %v", domain, err)
	}
	return crt
}

// assertRecovered checks that d's current certificate was stored by
// instance's term token from an unfinished order (counted once in instance's
// recovered metric), and is sound.
func (c *cluster) assertRecovered(d, instance string, token int64) {
	c.t.Helper()
	if cur := c.current(d); cur.Token != token {
		c.t.Errorf("current certificate of %s stored by token %d, want %d", d, cur.Token, token)
	}
	if got := c.inst[instance].counter("snip_certrenew_recovered_total"); got != 1 {
		c.t.Errorf("recovered metric of %s: %v, want 1", instance, got)
	}
	c.assertOneCurrentValidCertificate(d)
}

// assertOneCurrentValidCertificate checks, for each domain: exactly one
// current certificate, issued by the CA for that name, valid now, whose
// private key opens with the configured key (and with no other) and matches
// the certificate.
func (c *cluster) assertOneCurrentValidCertificate(domains ...string) {
	c.t.Helper()
	other := c.keyring(writeKeyFile(c.t, newKey(c.t)))
	for _, d := range domains {
		if n := c.int(`SELECT count(*) FROM certrenew_certificates WHERE domain = $1 AND current`, d); n != 1 {
			c.t.Errorf("%s: %d current certificates, want exactly 1", d, n)
			continue
		}
		crt := c.current(d)
		pair, err := crt.TLSCertificate()
		if err != nil {
			c.t.Errorf("%s: the private key does not match the certificate: %v", d, err)
			continue
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			c.t.Fatal(err)
		}
		inter := x509.NewCertPool()
		for _, der := range pair.Certificate[1:] {
			ic, err := x509.ParseCertificate(der)
			if err != nil {
				c.t.Fatal(err)
			}
			inter.AddCert(ic)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: d, Roots: c.ca.roots(), Intermediates: inter}); err != nil {
			c.t.Errorf("%s: the chain does not verify for the name against Pebble's root: %v", d, err)
		}
		_, err = certrenew.Current(context.Background(), c.pool, other, d)
		if !errors.Is(err, keyring.ErrUnknownKey) {
			c.t.Errorf("%s: opened with another key: error %v, want ErrUnknownKey", d, err)
		}
		var sealed []byte
		if err := c.pool.QueryRow(context.Background(), `SELECT key_sealed FROM certrenew_certificates WHERE domain = $1 AND current`, d).Scan(&sealed); err != nil {
			c.t.Fatal(err)
		}
		if strings.Contains(string(sealed), "PRIVATE KEY") {
			c.t.Errorf("%s: the stored private key is not encrypted", d)
		}
	}
}

func newKey(t testing.TB) string {
	b := make([]byte, keyring.KeySize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func writeKeyFile(t testing.TB, lines ...string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "certrenew.key")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (c *cluster) keyring(file string) *keyring.Keyring {
	c.t.Helper()
	o := certrenew.Options{KeyFile: file}
	k, err := o.Keyring()
	if err != nil {
		c.t.Fatal(err)
	}
	return k
}

// counter reads a counter of an instance's metrics.
func (in *instance) counter(name string, labels ...string) float64 {
	mfs, err := in.reg.Gather()
	if err != nil {
		panic(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// eventually runs pass until done reports true; it fails the test if that
// takes longer than a generous bound (a broken renewer, not a slow one).
func eventually(t testing.TB, what string, pass func(), done func() bool) {
	t.Helper()
	benchtest.Eventually(t, what, func() bool {
		if done() {
			return true
		}
		pass()
		return false
	})
}
