package chaos

import (
	"fmt"
	"slices"

	"github.com/snip/snip-jobs/leadership"
	etcdlayout "github.com/snip/snip-jobs/leadership/etcdlease/layout"
	kubelayout "github.com/snip/snip-jobs/leadership/kubelease/layout"
)

// Backend is the leadership store the instances run on (their config's
// leadership.backend).
type Backend string

// The backends a run can use.
const (
	// BackendEtcd: three etcd members, each a process (the default).
	BackendEtcd Backend = "etcd"
	// BackendKubernetes: coordination.k8s.io/v1 Leases on a real
	// kube-apiserver (testbench/kubetest) over the harness's three etcd
	// members; see kubestore.go for what this covers and what it does not.
	BackendKubernetes Backend = "kubernetes"
)

// Backends lists them.
var Backends = []Backend{BackendEtcd, BackendKubernetes}

// KubeKinds is every fault kind of the Kubernetes backend, in the order of
// the results table: the leaders' faults, etcd's (its members beneath the
// kube-apiserver: the instances reach only the API server), the API
// server's restart, PostgreSQL's restart and the operators' controls.
var KubeKinds = []Kind{KillLeader, KillLeaderReclaim, PauseLeader, PartitionLeader, PartitionSlowDB, TermLeader,
	EtcdMemberLoss, EtcdLeaderLoss, QuorumLoss, FollowersLoss, APIServerRestart, PostgresRestart, OperatorPause, ManualRun, Drain}

// Kinds is every fault kind that makes sense on the backend.
func (b Backend) Kinds() []Kind {
	if b == BackendKubernetes {
		return KubeKinds
	}
	return AllKinds
}

// rules are the backend's timing rules (its minimum TTL, whole seconds).
func (b Backend) rules() leadership.Rules {
	if b == BackendKubernetes {
		return kubelayout.Rules
	}
	return etcdlayout.Rules
}

// checkBackend checks the backend and that every kind of kinds can be
// injected on it.
func checkBackend(b Backend, kinds []Kind) error {
	if !slices.Contains(Backends, b) {
		return fmt.Errorf("unknown backend %q (known: %s, %s)", b, BackendEtcd, BackendKubernetes)
	}
	for _, k := range kinds {
		if !slices.Contains(b.Kinds(), k) {
			return fmt.Errorf("fault kind %q cannot be injected on the %s backend (its kinds: %v)", k, b, b.Kinds())
		}
	}
	return nil
}
