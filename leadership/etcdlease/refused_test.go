package etcdlease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/testbench/etcdtest"
	"github.com/snip/snip-jobs/testbench/etcdtlstest"
)

// A term whose etcd user lost its permission on the prefix after the win (an
// administrator revoked the role's grant) cannot release its leader key: etcd
// answers "permission denied", which no retry can change. Resign returns at
// once with ErrRefused, over TLS with authentication on a real etcd, rather
// than trying again until its context ends (the kube-apiserver's sibling:
// TestAReleaseTheAPIServerForbidsIsNotTriedAgain).
func TestAReleaseEtcdRefusesIsNotTriedAgain(t *testing.T) {
	t.Parallel()
	p := prefix(t)
	etcd := etcdtest.StartSecure(t, 1, p)
	// Not a test of expiry: a lease that cannot lapse on a busy machine.
	s := startSession(t, etcd.UserClient(t), "server-1", withTTL(8*time.Second, 2*time.Second)) // under prefix(t): p
	term := mustWin(t, s, "report")

	auth := etcd.Security().Auth
	keys := etcdtlstest.KeyRange(auth.Prefix)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := etcd.Client(t).RoleRevokePermission(ctx, auth.Role, keys, clientv3.GetPrefixRangeEnd(keys)); err != nil {
		t.Fatalf("revoke the role's grant: %v", err)
	}
	if err := term.Resign(ctx); !errors.Is(err, leadership.ErrRefused) || ctx.Err() != nil {
		t.Fatalf("Resign of a term whose user may no longer write its prefix: %v (context: %v); want ErrRefused at once", err, ctx.Err())
	}
}

// A resign request put after the session began and before its watch of
// requests was opened is delivered all the same (the watch starts from the
// session's first lease), so an operator's `resign` never waits in vain for
// a leader whose watch was still being opened.
func TestAResignRequestPutBeforeTheWatchOpensIsDelivered(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	s := startSession(t, cli, "server-1")
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := etcdlease.NewCluster(cli, prefix(t)).RequestResign(ctx, "report", 42); err != nil {
		t.Fatal(err)
	}
	got := make(chan int64, 1)
	go s.WatchResignRequests(ctx, func(job string, token int64) {
		if job == "report" {
			got <- token
		}
	})
	select {
	case tok := <-got:
		if tok != 42 {
			t.Errorf("request for token %d, want 42", tok)
		}
	case <-ctx.Done():
		t.Fatal("a request put before the watch opened was never delivered")
	}
}
