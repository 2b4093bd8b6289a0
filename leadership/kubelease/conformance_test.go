package kubelease_test

import (
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/internal/conformance"
	"github.com/snip/snip-jobs/leadership/kubelease"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// The guarantee's tests shared with the etcd backend (package conformance),
// on the real kube-apiserver: one term at a time with growing tokens, resign
// hands over at once, a leader cut off from the API server is replaced only
// after its deadline and fenced at PostgreSQL. Each test in a namespace of
// its own; a cut fails the session's requests (its open watches stay).
func TestTheGuarantee(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	namespaces := map[string]string{}
	nsOf := func(t *testing.T) string {
		mu.Lock()
		defer mu.Unlock()
		if namespaces[t.Name()] == "" {
			namespaces[t.Name()] = namespace(t, api)
		}
		return namespaces[t.Name()]
	}
	conformance.Run(t, conformance.Backend{
		Database: func(t *testing.T) *pgxpool.Pool { _, pool := dbtest.New(t); return pool },
		Margin:   margin,
		Cluster: func(t *testing.T) leadership.Cluster {
			return kubelease.NewCluster(clientset(t, api.Config()).CoordinationV1(), nsOf(t), "")
		},
		Start: func(t *testing.T, instance string) (*leadership.Session, func()) {
			var c cut
			s := start(t, api, nsOf(t), instance, cutBy(&c))
			return s, func() { c.on.Store(true) }
		},
	})
}
