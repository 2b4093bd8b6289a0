package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/app/clusterview"
	"github.com/snip/snip-jobs/app/connect"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
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
