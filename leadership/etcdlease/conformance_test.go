package etcdlease_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/internal/conformance"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// The guarantee's tests shared with the Kubernetes backend (package
// conformance), on a real etcd: one term at a time with growing tokens,
// resign hands over at once, a leader cut off from etcd (its client closed:
// no keep-alive, no revoke) is replaced only after its deadline and fenced
// at PostgreSQL.
func TestTheGuarantee(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	conformance.Run(t, conformance.Backend{
		Database: func(t *testing.T) *pgxpool.Pool { _, pool := dbtest.New(t); return pool },
		Margin:   testMargin,
		Cluster:  func(t *testing.T) leadership.Cluster { return etcdlease.NewCluster(etcd.Client(t), prefix(t)) },
		Start: func(t *testing.T, instance string) (*leadership.Session, func()) {
			cli := etcd.Client(t)
			s := startSession(t, cli, instance)
			return s, func() { _ = cli.Close() }
		},
	})
}
