// Package layout names the etcd backend's keys, and states its timing rules,
// without an etcd client: package configs reads a config's key prefix and
// checks its timing with it, and only what runs the backend links etcd's
// client (package etcdlease).
//
// Under a prefix (default /snip-jobs): <prefix>/leaders/<job> records a
// job's term, on its holder's lease; <prefix>/instances/<name> an
// instance's registration, on its lease; <prefix>/resign/<job> an operator's
// request that the term with the token it names resign;
// <prefix>/takeovers/<job> who took the job's last taken-over term (its
// token) from its holder; and <prefix>/operator-token is written to draw
// fresh fencing tokens.
package layout

import (
	"strings"
	"time"

	"github.com/snip/snip-jobs/leadership"
)

// DefaultPrefix is the key prefix unless the config says otherwise.
const DefaultPrefix = "/snip-jobs"

// Prefix is p without trailing slashes, or DefaultPrefix when empty.
func Prefix(p string) string {
	if p == "" {
		return DefaultPrefix
	}
	return strings.TrimRight(p, "/")
}

// LeaderKey records the leader of job under prefix.
func LeaderKey(prefix, job string) string { return Prefix(prefix) + "/leaders/" + job }

// InstanceKey registers instance under prefix.
func InstanceKey(prefix, instance string) string { return Prefix(prefix) + "/instances/" + instance }

// ResignKey is where an operator's request that job's leader resign is put.
func ResignKey(prefix, job string) string { return Prefix(prefix) + "/resign/" + job }

// TakeoverKey records job's last takeover (leadership.Cluster.TakeOver).
func TakeoverKey(prefix, job string) string { return Prefix(prefix) + "/takeovers/" + job }

// OperatorTokenKey is written to draw a fresh fencing token (its revision).
func OperatorTokenKey(prefix string) string { return Prefix(prefix) + "/operator-token" }

// Rules are etcd's rules for a lease's timing: its practical minimum TTL
// with its default heartbeat (100 ms) and election timeout (1 s), shorter
// requests being raised by etcd; leases in whole seconds; and how long a
// leader election of etcd's own can leave renewals unanswered with that
// election timeout: up to twice the timeout, and the new leader's first
// round trips.
var Rules = leadership.Rules{
	Backend:           "etcd",
	MinTTL:            2 * time.Second,
	WholeSeconds:      true,
	ElectionAllowance: 2200 * time.Millisecond,
}
