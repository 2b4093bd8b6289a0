package etcdlease_test

import (
	"testing"
	"time"

	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// With etcd's authentication on, every new gRPC stream costs a login (a
// bcrypt check and a raft round on the member). The session keeps one
// keep-alive stream: a dozen keep-alives open one stream and log in once, as
// the etcd member itself counts them.
func TestKeepAlivesShareOneStreamAndOneLogin(t *testing.T) {
	// Not parallel: etcd's gRPC metrics are process-wide, shared by every embedded member.
	etcd := etcdtest.StartSecure(t, 1, prefix(t))
	logins := func() float64 {
		return etcd.Metrics(t, 0).Sum("grpc_server_started_total", `grpc_method="Authenticate"`)
	}
	streams := func() float64 {
		return etcd.Metrics(t, 0).Sum("grpc_server_started_total", `grpc_method="LeaseKeepAlive"`)
	}
	s := startSession(t, etcd.UserClient(t), "server-a", withRenew(100*time.Millisecond))
	from := s.Stats().KeepAlivesSent
	loginsBefore, streamsBefore := logins(), streams()
	waitStats(t, s, "a dozen keep-alives", func(st leadership.Stats) bool { return st.KeepAlivesSent >= from+12 })
	if n := streams() - streamsBefore; n > 1 {
		t.Errorf("%v keep-alive streams opened for 12 keep-alives, want at most 1", n)
	}
	if n := logins() - loginsBefore; n > 1 {
		t.Errorf("%v logins for 12 keep-alives, want at most 1", n)
	}
}
