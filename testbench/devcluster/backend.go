package devcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/app/etcdlocal"
	"github.com/snip/snip-jobs/jobs/execjob/supervisor"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
	"github.com/snip/snip-jobs/scheduler"
)

// The backends the instances can keep their terms in (Config.Backend).
const (
	BackendEtcd       = "etcd"
	BackendKubernetes = "kubernetes"
)

// leaderRef is a job's leader as the supervisor says it.
type leaderRef struct {
	instance string
	token    int64
}

func refOf(l leadership.Leader) leaderRef { return leaderRef{l.Instance, l.Token} }

// leaderChange is one thing the narrator says: a leader found at the start
// (current), a term that started, or one that is over.
type leaderChange struct {
	job  string
	l    leaderRef
	kind changeKind
}

type changeKind int

const (
	changeCurrent changeKind = iota
	changeStarted
	changeOver
)

// terms is what the supervisor asks of the backend the instances keep their
// terms in: etcd (one embedded member) or a local Kubernetes API server.
type terms interface {
	// configSection is the instance config's lines that point at the
	// backend (etcd:, or kubernetes: with leadership.backend set apart).
	configSection() string
	leadershipLine() string
	// where describes the backend for the banner: a label and a line.
	where() (label, line string)
	// endsLease says how a dead instance's lease is ended, for people.
	endsLease() string
	// cluster is what an operator's command reads and asks of it.
	cluster() leadership.Cluster
	// watch calls f for every change of leader until ctx ends.
	watch(ctx context.Context, f func(leaderChange)) error
	close()
}

// etcdTerms is an embedded single-member etcd and a client to it.
type etcdTerms struct {
	srv *etcdlocal.Server
	cli *clientv3.Client
	ttl time.Duration
}

func (e *etcdTerms) configSection() string { return etcdSection(e.srv.Endpoint()) }

// etcdSection is an instance config's etcd section for endpoint.
func etcdSection(endpoint string) string {
	return fmt.Sprintf("etcd:\n  endpoints: [%s]\n  prefix: %s\n", endpoint, prefix)
}

func (e *etcdTerms) leadershipLine() string { return "" }

func (e *etcdTerms) endsLease() string { return "revokes it" }

func (e *etcdTerms) where() (string, string) {
	return "etcd", fmt.Sprintf("%s  (embedded; key prefix %s)", e.srv.Endpoint(), prefix)
}

func (e *etcdTerms) cluster() leadership.Cluster { return etcdlease.NewCluster(e.cli, prefix) }

// watch says the leaders, then every leader key created or deleted.
func (e *etcdTerms) watch(ctx context.Context, f func(leaderChange)) error {
	key := layout.LeaderKey(prefix, "")
	resp, err := e.cli.Get(ctx, key, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		f(leaderChange{strings.TrimPrefix(string(kv.Key), key), leaderRef{leaderName(kv.Value), kv.CreateRevision}, changeCurrent})
	}
	for wr := range e.cli.Watch(ctx, key, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			job := strings.TrimPrefix(string(ev.Kv.Key), key)
			switch {
			case ev.Type == clientv3.EventTypePut && ev.IsCreate():
				f(leaderChange{job, leaderRef{leaderName(ev.Kv.Value), ev.Kv.CreateRevision}, changeStarted})
			case ev.Type == clientv3.EventTypeDelete && ev.PrevKv != nil:
				f(leaderChange{job, leaderRef{leaderName(ev.PrevKv.Value), ev.PrevKv.CreateRevision}, changeOver})
			}
		}
	}
	return nil
}

func leaderName(value []byte) string {
	var rec etcdlease.LeaderRecord
	if err := json.Unmarshal(value, &rec); err != nil || rec.Instance == "" {
		return "?"
	}
	return rec.Instance
}

func (e *etcdTerms) close() {
	if e.cli != nil {
		_ = e.cli.Close()
	}
	if e.srv != nil {
		e.srv.Close()
	}
}

// reclaim does what systemd's ExecStopPost= (snip-jobs reclaim) does once
// an instance's process has exited and been reaped: it ends the lease the
// process left behind, if any, so that its jobs move now rather than when a
// peer judges it gone. It says what to add to the exit's announcement.
// It then records, as the command does, that the process's terms ended
// because it was reclaimed (pool: the cluster's database).
func reclaim(ctx context.Context, c leadership.Cluster, pool *pgxpool.Pool, instance string, ttl time.Duration) string {
	got, err := leadership.Reclaim(ctx, c, instance, "", func(ctx context.Context, reg leadership.Registration) error {
		return supervisor.WaitGone(ctx, instance, reg.PID)
	})
	switch {
	case err != nil:
		return fmt.Sprintf(" and its lease could not be ended (%v): its jobs move once it expires, within %v", err, ttl)
	case got.Revoked:
		if _, err := scheduler.RecordReclaimed(ctx, pool, got.Registration.Lease); err != nil {
			return fmt.Sprintf("; ended the lease it left (pid %d), so its jobs move now (not recorded in the history: %v)", got.Registration.PID, err)
		}
		return fmt.Sprintf("; ended the lease it left (pid %d), so its jobs move now", got.Registration.PID)
	}
	return ""
}
