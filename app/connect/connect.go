// Package connect opens what a snip-jobs command talks to, from its config:
// an etcd client (TLS files and login as configured, or one clear error
// naming the endpoint), a Kubernetes client for the kubernetes backend, and a
// PostgreSQL pool (a connect timeout, an
// application_name naming the instance, and never the URL in an error).
// The service and the client commands (status, resign, certs, migrate,
// report) share it.
package connect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"

	"github.com/snip/snip-jobs/app/etcdclient"
	"github.com/snip/snip-jobs/app/etcdlocal"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/kubelease"
)

// pgConnectTimeout bounds each connection attempt when the URL has no
// connect_timeout: pgx has no default, and a server that accepts but never
// answers would hang a run for as long as its context allows.
const pgConnectTimeout = 10 * time.Second

// NeedsTerms reports whether some job is a singleton gated by a term, of
// either backend (database-mode cron singletons and jobs that run everywhere
// need none).
func NeedsTerms(f *configs.File) bool {
	for _, j := range f.Jobs {
		if j.Mode() == configs.ModeLeader {
			return true
		}
	}
	return false
}

// NeedsEtcd reports whether some job is a singleton gated by an etcd term:
// NeedsTerms with leadership.backend: etcd.
func NeedsEtcd(f *configs.File) bool {
	return f.Leadership.Backend == configs.BackendEtcd && NeedsTerms(f)
}

// Cluster opens the configured backend as an operator's command sees it
// (resign, reclaim, report rebuild): etcd at endpoints (a comma-separated
// override of the config's, Endpoints), or the Kubernetes API server (Kube).
// where names the server for messages; close releases the connection.
func Cluster(f *configs.File, endpoints string, log *slog.Logger) (_ leadership.Cluster, where string, close func(), _ error) {
	if f.Leadership.Backend == configs.BackendKubernetes {
		cli, ns, where, err := Kube(f)
		if err != nil {
			return nil, "", nil, err
		}
		return kubelease.NewCluster(cli, ns, f.Kubernetes.Prefix), "the Kubernetes API server " + where, func() {}, nil
	}
	eps := Endpoints(f, endpoints)
	cli, err := Etcd(f, eps, log)
	if err != nil {
		return nil, "", nil, err
	}
	return etcdlease.NewCluster(cli, f.Etcd.Prefix), fmt.Sprintf("etcd %v", eps), func() { cli.Close() }, nil
}

// Endpoints are the endpoints a client command (status, resign) talks to:
// override (a comma-separated --endpoints) if set, else the config's, else the
// embedded etcd's default address.
func Endpoints(f *configs.File, override string) []string {
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

// EtcdConfig is how to reach endpoints with the config's TLS files and user.
// etcd's own log lines (errors only) go to log.
func EtcdConfig(f *configs.File, endpoints []string, log *slog.Logger) (etcdclient.Config, error) {
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

// Etcd connects a client command (status, resign, report) to
// endpoints: within dial_timeout, or with an error that names the endpoint
// and what is wrong (etcdclient.Connect).
func Etcd(f *configs.File, endpoints []string, log *slog.Logger) (*clientv3.Client, error) {
	cfg, err := EtcdConfig(f, endpoints, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.Etcd.DialTimeout)
	defer cancel()
	cli, _, err := etcdclient.Connect(ctx, cfg, nil)
	return cli, err
}

// Pool builds a PostgreSQL pool from the config's database URL. It does
// not connect: connections are made when first needed. Neither the URL nor a
// parse error quoting it is ever shown. tune, if any, adjusts the pool's
// settings after the URL's.
func Pool(ctx context.Context, f *configs.File, purpose string, tune ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
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

// Ping checks that PostgreSQL answers within d.
func Ping(ctx context.Context, pool *pgxpool.Pool, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return pool.Ping(ctx)
}
