// Package certtest runs the certificate renewer for tests of what consumes
// its certificates (TLS servers, files for nginx, HTTP-01 behind a web
// tier): a database with the schema, Pebble in-process (acmetest), the
// renewer job as the scheduler builds it, and one term to run its passes in.
// Everything is real; only the scheduler is left out, since these tests are
// about what happens after a certificate is stored.
package certtest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/fencing"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/acmetest"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// Job is the renewer's job name in these tests.
const Job = "certs"

// Renewer is a database, a CA and the renewer job. The test's package must
// run its tests through benchtest.RunMain.
type Renewer struct {
	T       testing.TB
	URL     string
	Pool    *pgxpool.Pool
	CA      *acmetest.CA
	KeyFile string
	Keys    *keyring.Keyring
	Options certrenew.Options
	job     scheduler.Job
}

// Start starts the database and the CA and builds the job; options, if
// set, changes the renewer's options first.
func Start(t testing.TB, options func(*certrenew.Options)) *Renewer {
	t.Helper()
	url, pool := dbtest.New(t)
	dir := t.TempDir()
	ca, err := acmetest.Start(dir)
	if err != nil {
		t.Fatalf("certtest: the CA: %v", err)
	}
	t.Cleanup(ca.Close)
	r := &Renewer{T: t, URL: url, Pool: pool, CA: ca, KeyFile: filepath.Join(dir, "certrenew.key")}
	key := make([]byte, keyring.KeySize)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.KeyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := certrenew.DefaultOptions()
	o.Directory, o.CARootsFile, o.Profile, o.KeyFile = ca.DirectoryURL, ca.RootsFile, acmetest.Profile, r.KeyFile
	o.Email = "ops@snip.example"
	o.RequirePublicTLD = false // the tests' names are under .test, which the CA's DNS resolves
	o.LockDelay = 0
	o.OrderTimeout = 10 * time.Second
	if options != nil {
		options(&o)
	}
	r.Options = o
	if r.Keys, err = o.Keyring(); err != nil {
		t.Fatal(err)
	}
	r.job, err = certrenew.Type().Build(scheduler.Env{Instance: "renewer", Pool: pool, Log: benchtest.Logger(t)}, configs.Job{
		Name: Job, Type: "certrenew", Singleton: true,
		Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Hour},
		Options:  jobtest.Options(t, o),
	})
	if err != nil {
		t.Fatalf("certtest: build the renewer: %v", err)
	}
	return r
}

// DB is a connection config for a reader of the database, named app.
func (r *Renewer) DB(app string) *pgx.ConnConfig {
	r.T.Helper()
	cc, err := pgx.ParseConfig(r.URL)
	if err != nil {
		r.T.Fatal(err)
	}
	cc.RuntimeParams["application_name"] = app
	return cc
}

// AddDomains adds custom domains wanting a certificate, as Snip's app does.
func (r *Renewer) AddDomains(names ...string) {
	r.T.Helper()
	for _, d := range names {
		benchtest.Exec(r.T, r.Pool, `INSERT INTO custom_domains (domain) VALUES ($1)`, d)
	}
}

// Route sends the CA's HTTP-01 validations to addrs (host:port each).
func (r *Renewer) Route(addrs ...string) { r.CA.Route(addrs...) }

// Pass runs one pass of the renewer in a term with token 1, and fails the
// test if it fails.
func (r *Renewer) Pass() {
	r.T.Helper()
	run := scheduler.NewRun(scheduler.RunConfig{
		Job: Job, Instance: "renewer", Token: 1, Fence: fencing.New(r.Pool, "renewer"), Log: benchtest.Logger(r.T),
	})
	if err := r.job.Run(context.Background(), run); err != nil {
		r.T.Fatalf("certtest: a pass of the renewer: %v", err)
	}
}

// DueNow makes domain's current certificate due for renewal at the next
// pass (and keeps the CA's renewal window from moving it).
func (r *Renewer) DueNow(domain string) {
	r.T.Helper()
	benchtest.Exec(r.T, r.Pool, `UPDATE certrenew_certificates SET renew_at = now() - interval '1 second',
		ari_next_check = now() + interval '1 day' WHERE domain = $1 AND current`, domain)
}

// Serial is the serial (hex) of domain's current certificate in the
// database.
func (r *Renewer) Serial(domain string) string {
	r.T.Helper()
	return benchtest.Value[string](r.T, r.Pool, `SELECT serial FROM certrenew_certificates WHERE domain = $1 AND current`, domain)
}

// Challenges starts the HTTP-01 handler on the database until the test ends,
// and returns it once it has read the tokens.
func (r *Renewer) Challenges(app string) *certserve.Challenges {
	r.T.Helper()
	h, err := certserve.NewChallenges(certserve.Config{DB: r.DB(app), Log: benchtest.Logger(r.T)})
	if err != nil {
		r.T.Fatal(err)
	}
	Run(r.T, h.Run, h.Ready())
	return h
}

// Certificates starts a certificate source on the database until the test
// ends, and returns it once it has read the certificates.
func (r *Renewer) Certificates(app string) *certserve.Certificates {
	r.T.Helper()
	src, err := certserve.NewCertificates(certserve.Config{DB: r.DB(app), Log: benchtest.Logger(r.T)}, r.Keys)
	if err != nil {
		r.T.Fatal(err)
	}
	Run(r.T, src.Run, src.Ready())
	return src
}

// Run runs a reader until the test ends and waits until it is ready. The
// reader must end with the test's cancellation, and only with it.
func Run(t testing.TB, run func(context.Context) error, ready <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("certtest: a reader ended with %v, want context.Canceled", err)
		}
	})
	select {
	case <-ready:
	case <-time.After(benchtest.Patience):
		t.Fatalf("certtest: a reader was not ready within %v", benchtest.Patience)
	}
}

// ServeHTTP serves h on a loopback port until the test ends and returns the
// address.
func ServeHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	ln := benchtest.Listen(t)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}
