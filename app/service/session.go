package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	etcdlayout "github.com/snip/snip-jobs/leadership/etcdlease/layout"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/app/clusterview"
	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/app/etcdclient"
	"github.com/snip/snip-jobs/app/etcdlocal"
	"github.com/snip/snip-jobs/app/etcdversion"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/leadership/kubelease/layout"
	"github.com/snip/snip-jobs/scheduler"
)

// holdsLease reports whether a session's stats show a current lease.
func holdsLease(st leadership.Stats) bool { return st.Lease != "" }

// leaseWord and serverWord name the backend's lease and server in messages.
func (r *runner) leaseWord() string {
	if r.cfg.Leadership.Backend == configs.BackendKubernetes {
		return "instance Lease"
	}
	return "etcd lease"
}

func (r *runner) serverWord() string {
	if r.cfg.Leadership.Backend == configs.BackendKubernetes {
		return "the Kubernetes API server"
	}
	return "etcd"
}

// startKube starts the session on Kubernetes Leases (leadership.backend:
// kubernetes). Nothing waits here: the session takes its instance Lease in
// the background, retrying while the API server does not answer, and
// waitFirstLease bounds the wait.
func (r *runner) startKube() error {
	f := r.cfg
	cli, ns, where, err := connect.Kube(f)
	if err != nil {
		return err
	}
	s, err := kubelease.NewSession(kubelease.Config{Client: cli, Namespace: ns, Prefix: f.Kubernetes.Prefix, Config: r.leadershipConfig()})
	if err != nil {
		return err
	}
	r.ilog.Info("leadership on Kubernetes Leases", "server", where, "prefix", f.Kubernetes.Prefix)
	r.session, r.terms, r.where = s, scheduler.Over(s), where
	r.view = clusterview.Kube(cli, ns, f.Kubernetes.Prefix, time.Now)
	leases := cli.Leases(ns)
	name := layout.InstanceLease(f.Kubernetes.Prefix, f.Instance)
	r.reach = func(ctx context.Context) error {
		_, err := leases.Get(ctx, name, metav1.GetOptions{})
		var answered apierrors.APIStatus
		if err == nil || errors.As(err, &answered) {
			return nil // any answer, a refusal or NotFound included, is an answer
		}
		return fmt.Errorf("the Kubernetes API server at %s: %w", where, err)
	}
	return nil
}

// leadershipConfig is the session's identity and timing, whichever backend.
func (r *runner) leadershipConfig() leadership.Config {
	l := r.cfg.Leadership
	return leadership.Config{Instance: r.cfg.Instance, TTL: l.TTL, Margin: l.Margin, RenewInterval: l.RenewInterval, Logger: r.log}
}

// waitFirstLease waits, within wctx (wait long), for the session's first
// lease; without a session there is nothing to wait for.
func (r *runner) waitFirstLease(ctx, wctx context.Context, wait time.Duration) error {
	if r.session == nil {
		return nil
	}
	err := r.session.WaitReady(wctx)
	switch {
	case errors.Is(err, leadership.ErrDuplicateInstance):
		return err
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("no %s within %v (is %s reachable at %v?): %w", r.leaseWord(), wait, r.serverWord(), r.where, err)
	}
	r.lastLease.Store(time.Now().UnixNano())
	return nil
}

// startEtcd connects to the configured etcd, or starts the embedded one (under
// ctx), and starts the leadership session. It waits (up to wctx, which ends
// after wait) while etcd does not answer to a login, and fails at once when
// etcd answers and refuses us (etcdclient.Connect); without a login the
// session does the waiting.
func (r *runner) startEtcd(ctx, wctx context.Context, wait time.Duration) error {
	f := r.cfg
	endpoints := f.Etcd.Endpoints
	if f.Etcd.Embedded() {
		srv, err := etcdlocal.Start(ctx, etcdlocal.Config{Dir: f.Etcd.EmbeddedDir, ClientAddr: r.embeddedListen, Log: r.log})
		if err != nil {
			return fmt.Errorf("embedded etcd: %w", err)
		}
		r.embedded = srv
		endpoints = []string{srv.Endpoint()}
		r.ilog.Warn("no etcd endpoints configured: started an embedded single-member etcd. "+
			"It is for a single instance or for development: instances that each start their own etcd do not see each other, "+
			"and every one of them would run every singleton. Several servers need a shared etcd cluster (etcd.endpoints).",
			"endpoint", srv.Endpoint(), "data_dir", srv.Dir())
	}
	cfg, err := connect.EtcdConfig(f, endpoints, r.log)
	if err != nil {
		return err
	}
	cli, eps, err := etcdclient.Connect(wctx, cfg, func(err error) {
		r.ilog.Warn("etcd does not answer yet; waiting", "err", err, "for_at_most", wait)
	})
	switch {
	case err != nil && wctx.Err() != nil:
		return fmt.Errorf("no etcd lease within %v (is etcd reachable at %v?): %w", wait, endpoints, err)
	case err != nil:
		return err
	}
	for _, e := range eps {
		if e.Version == "" {
			continue
		}
		if minimum, below := etcdversion.BelowMinimum(e.Version); below {
			r.ilog.Warn("this etcd member runs a version older than snip-jobs supports: upgrade it (docs/operations.md, \"etcd versions\")",
				"endpoint", e.URL, "version", e.Version, "minimum", minimum)
		} else {
			r.ilog.Info("etcd member", "endpoint", e.URL, "version", e.Version)
		}
	}
	r.etcd, r.view = cli, clusterview.Etcd(cli, f.Etcd.Prefix)
	s, err := etcdlease.NewSession(etcdlease.Config{Client: cli, Prefix: f.Etcd.Prefix, Config: r.leadershipConfig()})
	if err != nil {
		return err
	}
	r.session, r.terms, r.where = s, scheduler.Over(s), fmt.Sprint(cli.Endpoints())
	r.reach = func(ctx context.Context) error {
		_, err := cli.Get(ctx, etcdlayout.InstanceKey(f.Etcd.Prefix, f.Instance))
		return err
	}
	return nil
}
