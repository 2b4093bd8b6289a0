// Package testenv starts the real backing services that this module's tests
// run against, in the test process or as throwaway child processes:
//
//   - etcd (etcd.go): a 1- or 3-member cluster of real etcd servers started
//     in-process with go.etcd.io/etcd/server/v3/embed, each member with its
//     own data directory, whose members a test can stop, kill and restart
//     (including the current raft leader), and the fault proxy
//     (internal/faultproxy) to put between a client and a member to hold or
//     delay its traffic: a network partition. StartSecureEtcd
//     serves clients over TLS only, with client certificates required and
//     etcd's authentication on (package etcdsecure).
//   - PostgreSQL (postgres.go): a throwaway cluster from the machine's
//     PostgreSQL server binaries (initdb, postgres; package pgcluster), in
//     a temporary directory, on a free port.
//
// Nothing here is a mock or a fake: tests talk to the same server code that
// runs in production, over real sockets. Tests use loopback only: servers
// listen on 127.0.0.1, on ports picked free at start, and clients connect
// there. Everything a helper starts is stopped and removed through the test's
// Cleanup, or, for the PostgreSQL cluster shared by a test binary, by RunMain.
//
// The helpers take testing.TB, so benchmarks can use them as well as tests.
package testenv
