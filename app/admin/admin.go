// Package admin serves a snip-jobs instance's operator endpoints over HTTP:
//
//   - GET /metrics: the process's own Prometheus registry (never the global one).
//   - GET /healthz: 200 while the process runs and serves HTTP; a liveness probe.
//   - GET /readyz: 200 only when every readiness check passes: the etcd session
//     holds a live lease (when the config needs etcd) and PostgreSQL answers a
//     ping within CheckTimeout, and each of Config.Checks passes; otherwise
//     503 with one plain-text line per failing check. 503 "shutting down"
//     from the moment Stopping is called.
//   - GET /status: JSON: the instance, its lease (from leadership.Session.Stats)
//     and its jobs (scheduler.Status).
//   - GET /status/…: the cluster's status page (Config.Page, package
//     statuspage), when given; GET / then redirects to /status/.
//
// The routes are added to a caller's *http.ServeMux, the one job types receive
// as scheduler.Env.Mux, so their own routes are served on the same listener.
//
// What is guaranteed: Start returns only once the listener is bound (a port in
// use is an error, not a log line); Shutdown stops accepting connections and
// waits for requests in flight until its context ends. A readiness check never
// takes longer than CheckTimeout. A connection is bounded in time: its
// request must arrive within ReadTimeout, its answer be written within
// WriteTimeout (a client that stops reading is cut off), and it is closed
// after IdleTimeout without a request.
//
// Requests are answered only when their Host names this server: a loopback
// name or address (localhost, 127.0.0.1, [::1]), any IP address, or one of
// Config.AllowedHosts; any other gets 421 Misdirected Request. That defeats
// DNS rebinding, where a web page's script reaches the listener through a
// name the attacker controls (re-pointed at 127.0.0.1) and reads
// /status/cluster.json: the browser sends that name as the Host. An IP
// address cannot be rebound, so it is always accepted (Prometheus scrapes
// by address).
//
// What is NOT guaranteed: that /readyz's answer still holds when the caller
// acts on it; a lease can end right after. Host checking is no
// authentication: anything that can open a connection to the listener can
// send an accepted Host; keep it on loopback or a private network.
package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/scheduler/status"
)

// DefaultCheckTimeout bounds each readiness check.
const DefaultCheckTimeout = 2 * time.Second

// Connection time limits (Config's defaults). WriteTimeout covers the
// slowest handler with room to spare: /readyz runs its checks one after the
// other, the status page reads etcd and PostgreSQL within its own bound.
const (
	DefaultReadTimeout  = 10 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	DefaultIdleTimeout  = 60 * time.Second
)

// Session is what admin needs of a leadership session.
type Session interface {
	Stats() leadership.Stats
	// Err is the error that stopped the session, nil while it runs.
	Err() error
}

// Pinger is what admin needs of a PostgreSQL pool.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Jobs is what admin needs of a scheduler.
type Jobs interface {
	Status() []status.Job
}

// Config configures a Server.
type Config struct {
	// Listen is host:port (":0" or "127.0.0.1:0" picks a free port).
	// Required unless Listener is set.
	Listen string
	// Listener, when set, is served instead of listening on Listen: a
	// socket passed by the service manager (systemd socket activation).
	Listener net.Listener
	// Mux receives the admin routes; nil makes a private one.
	Mux *http.ServeMux
	// Gatherer is the process's metrics registry. Required.
	Gatherer prometheus.Gatherer
	// Instance names this server in /status.
	Instance string
	// Version is shown in /status.
	Version string
	// Session is checked by /readyz and shown in /status; nil when the config
	// needs no etcd.
	Session Session
	// SessionName names the session's backend in /readyz (default "etcd").
	SessionName string
	// DB is pinged by /readyz; nil when no database is configured.
	DB Pinger
	// Checks are further readiness checks, run after the database's ping
	// (each bounded by CheckTimeout) and reported as "<name>: <error>".
	Checks []Check
	// Jobs is shown in /status; nil until the scheduler exists (set it later
	// with SetJobs).
	Jobs Jobs
	// Page serves the status page under /status/ (package statuspage); nil:
	// no page.
	Page http.Handler
	// CheckTimeout bounds each readiness check (default 2 s).
	CheckTimeout time.Duration
	// AllowedHosts are the host names, besides loopback and IP addresses,
	// that requests may name in Host (http.allowed_hosts), lower case.
	AllowedHosts []string
	// ReadTimeout, WriteTimeout and IdleTimeout bound a connection (see the
	// package comment); 0 means the Default….
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	Log                                    *slog.Logger
}

// Check is a named readiness check: Err returns nil when the instance is
// ready as far as this check goes.
type Check struct {
	Name string
	Err  func(context.Context) error
}

// Server is the admin HTTP server.
type Server struct {
	cfg      Config
	srv      *http.Server
	ln       net.Listener
	served   chan struct{} // closed when Serve has returned
	serveErr error         // Serve's error, read after served is closed
	jobs     atomic.Pointer[Jobs]
	stopping atomic.Bool
}

// New checks cfg and adds the admin routes to cfg.Mux. A route that a job type
// already registered is an error.
func New(cfg Config) (s *Server, err error) {
	switch {
	case cfg.Listen == "" && cfg.Listener == nil:
		return nil, errors.New("admin: Listen or Listener is required")
	case cfg.Gatherer == nil:
		return nil, errors.New("admin: Gatherer is required")
	}
	for i, c := range cfg.Checks {
		if c.Name == "" || c.Err == nil {
			return nil, fmt.Errorf("admin: readiness check %d needs a Name and an Err", i)
		}
	}
	if cfg.Mux == nil {
		cfg.Mux = http.NewServeMux()
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, DefaultReadTimeout)
	cfg.WriteTimeout = cmp.Or(cfg.WriteTimeout, DefaultWriteTimeout)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout)
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s = &Server{cfg: cfg, served: make(chan struct{})}
	if cfg.Jobs != nil {
		s.SetJobs(cfg.Jobs)
	}
	defer func() {
		// ServeMux panics on a conflicting pattern.
		if p := recover(); p != nil {
			s, err = nil, fmt.Errorf("admin: %v", p)
		}
	}()
	cfg.Mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn),
		EnableOpenMetrics: true,
	}))
	cfg.Mux.HandleFunc("GET /healthz", s.healthz)
	cfg.Mux.HandleFunc("GET /readyz", s.readyz)
	cfg.Mux.HandleFunc("GET /status", s.status)
	if cfg.Page != nil {
		cfg.Mux.Handle("GET /status/", cfg.Page)
		cfg.Mux.Handle("GET /{$}", http.RedirectHandler("/status/", http.StatusFound))
	}
	s.srv = &http.Server{
		Handler:           s.checkHost(cfg.Mux),
		ReadHeaderTimeout: cfg.ReadTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// checkHost answers 421 to a request whose Host does not name this server
// (see the package comment).
func (s *Server) checkHost(next http.Handler) http.Handler {
	allowed := map[string]bool{}
	for _, h := range s.cfg.AllowedHosts {
		allowed[strings.ToLower(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := hostName(r.Host)
		if host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil || allowed[host] {
			next.ServeHTTP(w, r)
			return
		}
		s.cfg.Log.Debug("admin: request refused: its Host names another server", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusMisdirectedRequest)
		fmt.Fprintf(w, "Host %q is not served here: use a loopback or IP address, or add the name to http.allowed_hosts\n", r.Host)
	})
}

// hostName is the host of a Host header, without port, brackets or a final
// dot, in lower case.
func hostName(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// SetJobs sets what /status shows as jobs (the scheduler, once built).
func (s *Server) SetJobs(j Jobs) { s.jobs.Store(&j) }

// Start binds the listener and serves in the background.
func (s *Server) Start() error {
	ln, from := s.cfg.Listener, "passed socket"
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return fmt.Errorf("admin: listen on %s: %w", s.cfg.Listen, err)
		}
		from = "http.listen"
	}
	s.ln = ln
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
		}
	}()
	s.cfg.Log.Info("admin HTTP listening", "addr", ln.Addr().String(), "from", from)
	return nil
}

// Addr is the bound address (after Start).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Stopping makes /readyz answer 503 from now on: the process is shutting down.
func (s *Server) Stopping() { s.stopping.Store(true) }

// Shutdown stops accepting connections and waits for requests in flight to
// finish, until ctx ends (then it closes the rest). Calling it again is harmless.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Stopping()
	if s.ln == nil {
		return nil
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("admin: shutdown: %w", err)
	}
	<-s.served
	return s.serveErr
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// Ready runs the readiness checks and returns every failure, nil when ready.
// The database's ping, which may take a while, comes first, so that the
// session's state is read last: /status then shows readiness, the lease and
// the terms as of one moment.
func (s *Server) Ready(ctx context.Context) error {
	if s.stopping.Load() {
		return errors.New("shutting down")
	}
	var errs []error
	if db := s.cfg.DB; db != nil {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CheckTimeout)
		err := db.Ping(cctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("postgres: no answer to a ping within %v: %w", s.cfg.CheckTimeout, err))
		}
	}
	for _, c := range s.cfg.Checks {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CheckTimeout)
		err := c.Err(cctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	if sess := s.cfg.Session; sess != nil {
		name := cmp.Or(s.cfg.SessionName, "etcd")
		if err := sessionReady(sess, name); err != nil {
			errs = append([]error{fmt.Errorf("%s: %w", name, err)}, errs...) // the session first, as always
		}
	}
	return errors.Join(errs...)
}

// sessionReady: a live lease is one with headroom left (an etcd lease ID or
// a Kubernetes instance Lease: Headroom is 0 without a current lease).
func sessionReady(sess Session, name string) error {
	if err := sess.Err(); err != nil {
		return fmt.Errorf("session stopped: %w", err)
	}
	if sess.Stats().Headroom <= 0 {
		return fmt.Errorf("the session holds no lease (%s unreachable, or not yet granted)", name)
	}
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.Ready(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(w, "not ready: %s\n", line)
		}
		return
	}
	fmt.Fprintln(w, "ready")
}

// Status is the body of /status.
type Status struct {
	Instance string       `json:"instance"`
	Version  string       `json:"version,omitempty"`
	Ready    bool         `json:"ready"`
	NotReady string       `json:"not_ready,omitempty"`
	Lease    *LeaseStatus `json:"lease,omitempty"` // nil when the config needs no etcd
	Jobs     []status.Job `json:"jobs"`
}

// LeaseStatus is leadership.Stats for people and scripts.
type LeaseStatus struct {
	ID                string           `json:"id,omitempty"` // etcd: hex, as etcdctl prints it; Kubernetes: the holder identity; "" between leases
	HeadroomSeconds   float64          `json:"headroom_seconds"`
	LastRenewal       time.Time        `json:"last_renewal,omitzero"`
	LeasesGranted     int64            `json:"leases_granted"`
	KeepAlivesSent    int64            `json:"keepalives_sent"`
	KeepAliveFailures int64            `json:"keepalive_failures"`
	Reclaimed         int64            `json:"predecessor_leases_reclaimed"`
	Waiting           int64            `json:"campaigns_waiting"`
	LeaseEnds         map[string]int64 `json:"lease_ends"`
	Error             string           `json:"error,omitempty"`
}

// CurrentStatus is what /status shows.
func (s *Server) CurrentStatus(ctx context.Context) Status {
	st := Status{Instance: s.cfg.Instance, Version: s.cfg.Version, Jobs: []status.Job{}}
	if err := s.Ready(ctx); err != nil {
		st.NotReady = err.Error()
	} else {
		st.Ready = true
	}
	if sess := s.cfg.Session; sess != nil {
		ls := sess.Stats()
		l := &LeaseStatus{
			HeadroomSeconds: ls.Headroom.Seconds(), LastRenewal: ls.LastRenewal,
			LeasesGranted: ls.LeasesGranted, KeepAlivesSent: ls.KeepAlivesSent, KeepAliveFailures: ls.KeepAliveFailures,
			Reclaimed: ls.Reclaimed, Waiting: ls.Waiting, LeaseEnds: map[string]int64{},
		}
		l.ID = ls.Lease
		for r, n := range ls.LeaseEnds {
			l.LeaseEnds[string(r)] = n
		}
		if err := sess.Err(); err != nil {
			l.Error = err.Error()
		}
		st.Lease = l
	}
	if j := s.jobs.Load(); j != nil && *j != nil {
		st.Jobs = (*j).Status()
	}
	return st
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s.CurrentStatus(r.Context())); err != nil {
		s.cfg.Log.Debug("write /status", "err", err)
	}
}
