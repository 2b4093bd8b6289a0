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
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

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

// Kube is a client of the Kubernetes API server that holds the Leases, the
// namespace they are in, and where that is, for messages: kubernetes.server
// with token_file (client-go re-reads it as it changes, for rotated tokens)
// and ca_file; or kubernetes.kubeconfig (fromKubeconfig); or, without
// either, the pod's service account
// (rest.InClusterConfig) and, unless kubernetes.namespace says otherwise, the
// namespace it runs in. Nothing is contacted yet.
func Kube(f *configs.File) (_ coordclient.CoordinationV1Interface, namespace, where string, _ error) {
	k := f.Kubernetes
	var rc *rest.Config
	namespace = k.Namespace
	if k.InCluster() {
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, "", "", fmt.Errorf("kubernetes: %s sets no kubernetes.server, and this process cannot use a pod's service account: %w "+
				"(set kubernetes.server, token_file and namespace to run outside the cluster)", f.Path, err)
		}
		if namespace == "" {
			b, err := os.ReadFile(serviceAccountNamespace)
			if err != nil {
				return nil, "", "", fmt.Errorf("kubernetes: the service account's namespace: %w (or set kubernetes.namespace in %s)", err, f.Path)
			}
			namespace = strings.TrimSpace(string(b))
		}
	} else if k.Kubeconfig != "" {
		var err error
		if rc, namespace, err = fromKubeconfig(k, f.Path); err != nil {
			return nil, "", "", err
		}
	} else {
		// Read once now, for an error naming the setting rather than a
		// failed request later.
		if b, err := configs.ReadSecretFile(configs.SecretFile{Key: "kubernetes.token_file", Path: k.TokenFile}); err != nil {
			return nil, "", "", err
		} else if strings.TrimSpace(string(b)) == "" {
			return nil, "", "", fmt.Errorf("kubernetes.token_file %s: empty", k.TokenFile)
		}
		rc = &rest.Config{Host: k.Server, BearerTokenFile: k.TokenFile, TLSClientConfig: rest.TLSClientConfig{CAFile: k.CAFile}}
	}
	rc.UserAgent = "snip-jobs " + f.Instance
	rc.QPS = -1 // kubelease refuses a throttled client: see its Config.Client
	cs, err := coordclient.NewForConfig(rc)
	if err != nil {
		return nil, "", "", fmt.Errorf("kubernetes client for %s: %w", rc.Host, err)
	}
	return cs, namespace, fmt.Sprintf("%s, namespace %s", rc.Host, namespace), nil
}

// fromKubeconfig loads the client configuration of k.Kubeconfig's context
// (k.Context, or its current one) and the namespace of the Leases:
// kubernetes.namespace, else the context's, else "default". A context whose
// cluster is reached without TLS, or without checking the server's
// certificate, is refused (kubeconfigTransport), as kubernetes.server is.
func fromKubeconfig(k configs.Kubernetes, path string) (*rest.Config, string, error) {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: k.Kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: k.Context})
	raw, err := cc.RawConfig()
	if err == nil {
		err = kubeconfigTransport(&raw, k.Context)
	}
	var rc *rest.Config
	if err == nil {
		rc, err = cc.ClientConfig()
	}
	if err == nil {
		err = restTransport(rc)
	}
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes.kubeconfig %s (in %s): %w", k.Kubeconfig, path, err)
	}
	namespace := k.Namespace
	if namespace == "" {
		if namespace, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("kubernetes.kubeconfig %s: the context's namespace: %w (or set kubernetes.namespace in %s)", k.Kubeconfig, err, path)
		}
	}
	return rc, namespace, nil
}

// CheckKubeconfig reads kubernetes.kubeconfig as Kube would, without its
// credentials and contacting nothing, for validate: problem is what Kube
// would refuse in it (a context that is not there, a cluster reached over
// plain HTTP or with insecure-skip-tls-verify), worded as Kube words it
// without the config file's name; unread says why the file could not be
// read here (validate may run where the config is written, not where its
// secret files are), and then nothing was checked.
func CheckKubeconfig(k configs.Kubernetes) (problem, unread error) {
	if k.Kubeconfig == "" {
		return nil, nil
	}
	data, err := configs.ReadSecretFile(configs.SecretFile{Key: "kubernetes.kubeconfig", Path: k.Kubeconfig})
	if err != nil {
		return nil, err
	}
	raw, err := clientcmd.Load(data)
	if err == nil {
		err = kubeconfigTransport(raw, k.Context)
	}
	if err != nil {
		return fmt.Errorf("kubernetes.kubeconfig %s: %w", k.Kubeconfig, err), nil
	}
	return nil, nil
}

// kubeconfigTransport refuses a kubeconfig whose chosen context (context,
// else its current one) is missing or names a cluster that would take the
// credentials without TLS (a server that is not https://) or to a server
// whose certificate is not checked (insecure-skip-tls-verify): the rules of
// kubernetes.server, in the kubeconfig's words.
func kubeconfigTransport(raw *clientcmdapi.Config, context string) error {
	name := context
	if name == "" {
		name = raw.CurrentContext
	}
	if name == "" {
		return errors.New("names no current-context, and kubernetes.context is not set: set one of them")
	}
	c, ok := raw.Contexts[name]
	if !ok || c == nil {
		return fmt.Errorf("context %q is not in it", name)
	}
	cl, ok := raw.Clusters[c.Cluster]
	if !ok || cl == nil {
		return fmt.Errorf("context %q: its cluster %q is not in it", name, c.Cluster)
	}
	where := fmt.Sprintf("context %q (cluster %q)", name, c.Cluster)
	u, err := url.Parse(cl.Server)
	switch {
	case cl.InsecureSkipTLSVerify:
		return fmt.Errorf("%s: insecure-skip-tls-verify: true turns off the check of the API server's certificate, "+
			"so the credentials would go to whoever answers at %s: remove it (and name the server's CA with certificate-authority)", where, cl.Server)
	case err == nil && u.Scheme == "http":
		return fmt.Errorf("%s: server %q is plain HTTP, so the credentials would travel in clear text: write https://", where, cl.Server)
	case err != nil || u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("%s: server %q must be a URL such as https://10.0.0.1:6443", where, cl.Server)
	}
	return nil
}

// restTransport is kubeconfigTransport's rule on the client configuration
// client-go made of the kubeconfig, in case anything but the cluster's own
// settings (client-go's defaults) made it insecure.
func restTransport(rc *rest.Config) error {
	u, _, err := rest.DefaultServerUrlFor(rc)
	switch {
	case err != nil:
		return err
	case rc.Insecure:
		return fmt.Errorf("the client would not check the API server's certificate (%s)", rc.Host)
	case u.Scheme != "https":
		return fmt.Errorf("the client would reach the API server over plain HTTP (%s)", u)
	}
	return nil
}

// serviceAccountNamespace is the namespace of a pod's service account.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

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
