package certsync_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew/certserve"
	"github.com/snip/snip-jobs/jobs/certsync"
	"github.com/snip/snip-jobs/scheduler"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/certtest"
	"github.com/snip/snip-jobs/testbench/jobtest"
)

// syncer is a certsync job running on the renewer's database, as on one of
// the servers.
type syncer struct {
	*certsync.Job
	reg  *prometheus.Registry
	logs *lockedBuffer // the job's log lines, JSON
	stop func()
}

// startSyncer builds a certsync job (name "cert-files", instance "server-2")
// with the renewer's key file (a secret file of the service's) and options
// changed by opts, and runs it until
// the test ends or stop is called.
func startSyncer(t *testing.T, r *certtest.Renewer, opts func(*certsync.Options)) *syncer {
	t.Helper()
	return startSyncerOn(t, r, r.Pool, opts)
}

// startSyncerOn is startSyncer with the service's pool given (one whose
// URL holds a password: see poolWithPassword).
func startSyncerOn(t *testing.T, r *certtest.Renewer, pool *pgxpool.Pool, opts func(*certsync.Options)) *syncer {
	t.Helper()
	o := certsync.DefaultOptions()
	o.KeyFile, o.Settle = r.KeyFile, 50*time.Millisecond
	opts(&o)
	s := &syncer{reg: prometheus.NewRegistry(), logs: &lockedBuffer{}}
	log := slog.New(slog.NewMultiHandler(benchtest.Logger(t).Handler(), slog.NewJSONHandler(s.logs, nil)))
	env := scheduler.Env{Instance: "server-2", Pool: pool, Log: log.With("instance", "server-2", "job", "cert-files"), Metrics: s.reg,
		Secrets: []string{r.KeyFile}} // the renewer's keys: the service's secret file
	job, err := certsync.Type().Build(env,
		configs.Job{Name: "cert-files", Type: "certsync", Schedule: configs.Schedule{Kind: configs.Continuous}, Options: jobtest.Options(t, o)})
	if err != nil {
		t.Fatalf("build the certsync job: %v", err)
	}
	s.Job = job.(*certsync.Job)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		run := scheduler.NewRun(scheduler.RunConfig{Job: "cert-files", Instance: "server-2", Log: log})
		if err := job.Run(ctx, run); err != nil {
			t.Errorf("the certsync job ended with %v", err)
		}
	}()
	var once sync.Once
	s.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(s.stop)
	return s
}

// poolWithPassword is a pool on the renewer's database whose URL holds
// password, as the service's does (the test cluster trusts its clients, so
// the password is never asked for).
func poolWithPassword(t *testing.T, r *certtest.Renewer, password string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Password = password
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// waitFor waits (on the job's Synced signal) until cond holds for the
// status of a sync, and returns that status.
func (s *syncer) waitFor(t *testing.T, what string, cond func(certsync.Status) bool) certsync.Status {
	t.Helper()
	deadline := time.After(benchtest.Patience)
	for {
		synced := s.Synced()
		st := s.Status()
		if st.Syncs > 0 && cond(st) {
			return st
		}
		select {
		case <-synced:
		case <-deadline:
			t.Fatalf("waited %v for the certsync job: %s; its last status: %+v", benchtest.Patience, what, st)
		}
	}
}

// waitFiles waits until the directory holds exactly want (domain → serial).
func (s *syncer) waitFiles(t *testing.T, want map[string]string) certsync.Status {
	t.Helper()
	return s.waitFor(t, "files "+fmtFiles(want), func(st certsync.Status) bool { return fmtFiles(st.Files) == fmtFiles(want) })
}

func fmtFiles(m map[string]string) string {
	var b strings.Builder
	for _, d := range sortedKeys(m) {
		b.WriteString(d + "=" + m[d] + " ")
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// metric is the value of the job's series name with the given labels
// (besides job), 0 if there is none.
func (s *syncer) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// logged reports whether the job logged a line containing every one of
// parts.
func (s *syncer) logged(parts ...string) bool {
	for _, line := range strings.Split(s.logs.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all && line != "" {
			return true
		}
	}
	return false
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// issue makes the renewer get certificates for domains, its HTTP-01
// answered by a challenge listener of its own, and returns their serials.
func issue(t *testing.T, r *certtest.Renewer, domains ...string) map[string]string {
	t.Helper()
	r.Route(certtest.ServeHTTP(t, r.Challenges("renewer challenges")))
	r.AddDomains(domains...)
	r.Pass()
	serials := map[string]string{}
	for _, d := range domains {
		serials[d] = r.Serial(d)
	}
	return serials
}

// serveChallenges is another instance's challenge listener: the HTTP-01
// tokens of the shared table, from memory, behind the limits of port 80.
func serveChallenges(t *testing.T, h *certserve.Challenges) string {
	t.Helper()
	ln := benchtest.Listen(t)
	srv := certserve.NewChallengeServer(h, certserve.DefaultServerLimits(), benchtest.Logger(t))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// get asks addr for https://domain/abc, trusting only roots, and returns
// the serial (hex) of the certificate it was shown and the status.
func get(roots *x509.CertPool, addr, domain string) (serial string, status int, err error) {
	client := &http.Client{
		Timeout: benchtest.Patience,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
			DisableKeepAlives: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Get("https://" + domain + "/abc")
	if err != nil {
		return "", 0, err
	}
	resp.Body.Close()
	return hex.EncodeToString(resp.TLS.PeerCertificates[0].SerialNumber.Bytes()), resp.StatusCode, nil
}

// handshake connects to addr sending serverName as SNI, trusting nothing
// (it only asks which certificate, if any, is presented).
func handshake(addr, serverName string) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: benchtest.Patience}, "tcp", addr,
		&tls.Config{ServerName: serverName, InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// fileGroup is the group the files are given: one that a TLS server's
// workers are in. As root, nginx's workers run as nobody:nogroup; otherwise
// they run as this user, in its primary group.
func fileGroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() == 0 {
		return "nogroup"
	}
	g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	if err != nil {
		t.Fatalf("the primary group of this user: %v", err)
	}
	return g.Name
}

func groupID(t *testing.T, name string) int {
	t.Helper()
	g, err := user.LookupGroup(name)
	if err != nil {
		t.Fatalf("group %s: %v", name, err)
	}
	id, _ := strconv.Atoi(g.Gid)
	return id
}

// openDir is a temporary directory that another user (nginx's workers, when
// the tests run as root) can traverse.
func openDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// entries lists dir's names ("" entries for a missing dir).
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}
