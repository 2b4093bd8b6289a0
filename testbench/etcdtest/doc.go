// Package etcdtest starts real etcd clusters for this module's tests: 1 or 3
// members started in the test process with go.etcd.io/etcd/server/v3/embed
// (through app/etcdlocal), each with its own data directory, whose
// members a test can stop, kill and restart (including the current raft
// leader), and the fault proxy (testbench/faultproxy) to put between a client
// and a member to hold or delay its traffic: a network partition.
// StartSecure serves clients over TLS only, with client certificates
// required and etcd's authentication on (package etcdsecure). WaitKeys waits
// on etcd's own change signal (a watch) rather than polling.
//
// Nothing here is a mock: tests talk to etcd's server code over real
// sockets on loopback, on ports picked free at start. Members are stopped at
// the test's Cleanup.
package etcdtest
