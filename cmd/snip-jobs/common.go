package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/internal/etcdclient"
	"github.com/snip/snip-jobs/internal/etcdlocal"
	"github.com/snip/snip-jobs/jobs/builtin"
	"github.com/snip/snip-jobs/scheduler"
)

const (
	defaultConfigPath = "/etc/snip-jobs/snip-jobs.yaml"
	configEnv         = "SNIP_JOBS_CONFIG"
	// pgConnectTimeout bounds each connection attempt when the URL has no
	// connect_timeout: pgx has no default, and a server that accepts but never
	// answers would hang a run for as long as its context allows.
	pgConnectTimeout = 10 * time.Second
)

// configFlag adds --config to fs.
func configFlag(fs *flag.FlagSet) *string {
	def := os.Getenv(configEnv)
	if def == "" {
		def = defaultConfigPath
	}
	return fs.String("config", def, "the config file; the default is $"+configEnv+" when set")
}

// loadConfig loads the config file with the built-in job types. Problems in the
// file are a usage error (exit 2), each on its own line as file:line:col.
func loadConfig(path string) (*configs.File, error) {
	f, err := configs.Load(path, registry())
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return f, nil
}

// newLogger builds the process's logger from the config: JSON unless the
// format is text, or auto and w is a terminal.
func newLogger(cfg configs.Log, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.Level}
	f, isFile := w.(*os.File)
	text := cfg.Format == configs.LogText || (cfg.Format != configs.LogJSON && isFile && isTerminal(f))
	if text {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// needsEtcd reports whether some job is a singleton gated by an etcd term
// (database-mode cron singletons and jobs that run everywhere need no etcd).
func needsEtcd(f *configs.File) bool {
	for _, j := range f.Jobs {
		if j.Mode() == configs.ModeLeader {
			return true
		}
	}
	return false
}

// etcdEndpoints are the endpoints a client command (status, resign) talks to:
// override (a comma-separated --endpoints) if set, else the config's, else the
// embedded etcd's default address.
func etcdEndpoints(f *configs.File, override string) []string {
	if override != "" {
		var eps []string
		for _, e := range strings.Split(override, ",") {
			if e = strings.TrimSpace(e); e != "" {
				eps = append(eps, e)
			}
		}
		return eps
	}
	if !f.Etcd.Embedded() {
		return f.Etcd.Endpoints
	}
	return []string{"http://" + etcdlocal.DefaultClientAddr}
}

// etcdConfig is how to reach endpoints with the config's TLS files and user.
// etcd's own log lines (errors only) go to log.
func etcdConfig(f *configs.File, endpoints []string, log *slog.Logger) (etcdclient.Config, error) {
	cfg := etcdclient.Config{
		Endpoints: endpoints, DialTimeout: f.Etcd.DialTimeout,
		CA: f.Etcd.TLS.CA, Cert: f.Etcd.TLS.Cert, Key: f.Etcd.TLS.Key,
		Logger: etcdlocal.ZapLogger(log.With("component", "etcd-client"), zapcore.ErrorLevel),
	}
	if f.Etcd.Auth.User != "" {
		pw, err := f.EtcdPassword()
		if err != nil {
			return cfg, fmt.Errorf("etcd auth: %w", err)
		}
		cfg.User, cfg.Password = f.Etcd.Auth.User, pw
	}
	return cfg, nil
}

// newEtcdClient connects a client command (status, resign, report) to
// endpoints: within dial_timeout, or with an error that names the endpoint
// and what is wrong (etcdclient.Connect).
func newEtcdClient(f *configs.File, endpoints []string, log *slog.Logger) (*clientv3.Client, error) {
	cfg, err := etcdConfig(f, endpoints, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.Etcd.DialTimeout)
	defer cancel()
	cli, _, err := etcdclient.Connect(ctx, cfg, nil)
	return cli, err
}

// openPool builds a PostgreSQL pool from the config's database URL. It does
// not connect: connections are made when first needed. Neither the URL nor a
// parse error quoting it is ever shown. tune, if any, adjusts the pool's
// settings after the URL's.
func openPool(ctx context.Context, f *configs.File, purpose string, tune ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	url, err := f.DatabaseURL()
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New("the database URL cannot be parsed (not shown: it may hold a password)")
	}
	if pc.ConnConfig.ConnectTimeout <= 0 {
		pc.ConnConfig.ConnectTimeout = pgConnectTimeout
	}
	if _, set := pc.ConnConfig.RuntimeParams["application_name"]; !set {
		pc.ConnConfig.RuntimeParams["application_name"] = "snip-jobs " + purpose + " " + f.Instance
	}
	for _, t := range tune {
		t(pc)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database pool: %w", err)
	}
	return pool, nil
}

// pingDB checks that PostgreSQL answers within d.
func pingDB(ctx context.Context, pool *pgxpool.Pool, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return pool.Ping(ctx)
}

// writeLines writes each line of s to w, prefixed.
func writeLines(w io.Writer, prefix, s string) {
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		fmt.Fprintf(w, "%s%s\n", prefix, line)
	}
}

// registry is every job type built into this binary (package builtin).
func registry() *scheduler.Registry { return builtin.Registry() }
