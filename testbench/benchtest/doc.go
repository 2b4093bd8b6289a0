// Package benchtest starts the real PostgreSQL that this module's tests run
// against, and holds the small waiting, logging and metrics helpers every
// test kit shares:
//
//   - PostgreSQL (postgres.go): a throwaway cluster from the machine's
//     PostgreSQL server binaries (initdb, postgres; package pgcluster), on a
//     free port, shared by a test binary (RunMain) or one per test.
//   - Waiting on signals (signal.go, wait.go), a test logger (log.go), a
//     /metrics scrape (metrics.go), a held free port (port.go), and how many
//     tests of a mostly waiting package run at once (parallel.go).
//
// etcd lives apart, in testbench/etcdtest, so that a test binary that needs
// only PostgreSQL does not link etcd's server.
//
// Nothing here is a mock or a fake: tests talk to the same server code that
// runs in production, over real sockets, on loopback only. Everything a
// helper starts is stopped and removed through the test's Cleanup, or, for
// the PostgreSQL cluster shared by a test binary, by RunMain.
//
// The helpers take testing.TB, so benchmarks can use them as well as tests.
package benchtest
