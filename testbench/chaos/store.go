package chaos

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// startStore starts the instances' store (Options.Backend) and returns the
// store's sections of an instance's config, given the instance. Both
// backends start the three etcd members: on Kubernetes, the kube-apiserver
// stores its data in them.
func (c *cluster) startStore(ctx context.Context) (func(*instance) string, error) {
	secure, err := c.startEtcd(ctx)
	if err != nil {
		return nil, err
	}
	if c.opts.Backend == BackendKubernetes {
		if c.kube, err = startKube(ctx, c.dir, c.log, c.etcd); err != nil {
			return nil, fmt.Errorf("kube-apiserver: %w", err)
		}
		return func(in *instance) string { return c.kube.section(in.store[0].Addr()) }, nil
	}
	return func(in *instance) string {
		eps := make([]string, len(in.store))
		for i, p := range in.store {
			eps[i] = "https://" + p.Addr()
		}
		return fmt.Sprintf("etcd:\n  endpoints: [%s]\n  prefix: %s\n  dial_timeout: 2s\n%s", strings.Join(eps, ", "), Prefix, secure)
	}, nil
}

// storeAddrs are the host:ports an instance reaches its store at, each
// through a fault proxy of its own: every etcd member, or the API server.
func (c *cluster) storeAddrs() []string {
	if c.kube != nil {
		return []string{c.kube.addr()}
	}
	var addrs []string
	for _, m := range c.etcd.members {
		if u, err := url.Parse(m.clientURL); err == nil {
			addrs = append(addrs, u.Host)
		}
	}
	return addrs
}

// observe starts the observer of the store's terms.
func (c *cluster) observe(ctx context.Context) (*observer, error) {
	if c.kube != nil {
		return newKubeObserver(ctx, c.kube.srv.Config())
	}
	return newObserver(ctx, c.etcd.cli, Prefix)
}

// kubeVersion is the kube-apiserver's version ("" on etcd).
func (c *cluster) kubeVersion() string {
	if c.kube == nil {
		return ""
	}
	return c.kube.version
}

// startEtcd starts the three members (this test binary as an embedded member,
// or the given etcd binary) and waits for a leader; it returns the instances'
// etcd settings (TLS and auth).
func (c *cluster) startEtcd(ctx context.Context) (secure string, err error) {
	exe, native := "", false
	if c.opts.EtcdBinary != "" {
		exe, native = c.opts.EtcdBinary, true
	} else if exe, err = os.Executable(); err != nil {
		return "", err
	}
	if c.etcd, err = startEtcd(ctx, exe, native, c.dir, 3); err != nil {
		return "", err
	}
	if c.etcdVersion, err = c.etcd.version(ctx); err != nil {
		return "", err
	}
	if secure, err = c.etcdSettings(); err != nil {
		return "", err
	}
	_, err = c.etcd.waitLeader(ctx, readyBound)
	return secure, err
}

// etcdSettings is the etcd block's TLS and auth settings of every instance:
// the harness's CA, its client certificate, and snip-jobs' user (whose role
// covers the prefix only), the password in a file.
func (c *cluster) etcdSettings() (string, error) {
	pw := filepath.Join(c.dir, "etcd-password")
	if err := os.WriteFile(pw, []byte(c.etcd.auth.Password+"\n"), 0o600); err != nil {
		return "", err
	}
	p := c.etcd.pki
	return fmt.Sprintf("  tls:\n    ca: %s\n    cert: %s\n    key: %s\n  auth:\n    user: %s\n    password_file: %s\n",
		p.CA, p.ClientCert, p.ClientKey, c.etcd.auth.User, pw), nil
}
