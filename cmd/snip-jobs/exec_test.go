package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
	"github.com/snip/snip-jobs/testbench/exectest"
)

// watcherJob is an exec singleton running the test bench's watcher
// (package exectest) continuously: command is the watcher and its folder.
func watcherJob(command []string) string {
	return fmt.Sprintf(`
  - name: watcher
    type: exec
    singleton: true
    continuous: true
    grace: 5s
    options:
      command: [%s, %s]
      kill_grace: 500ms
`, command[0], command[1])
}

// execCluster is two instances running the watcher on one backend.
type execCluster struct {
	procs    map[string]*instance
	endpoint string   // the etcd member's (etcd only)
	env      []string // the instances' environment (etcd only)
}

func startExecCluster(t *testing.T, backend string, jobs string) execCluster {
	t.Helper()
	if backend != "kubernetes" {
		return startEtcdExecCluster(t, jobs)
	}
	ec := execCluster{procs: map[string]*instance{}}
	o := newKubeOps(t, jobs, "")
	for _, name := range []string{"server-a", "server-b"} {
		ec.procs[name] = o.start(name)
	}
	return ec
}

// startEtcdExecCluster is startExecCluster on one etcd member.
func startEtcdExecCluster(t testing.TB, jobs string) execCluster {
	t.Helper()
	ec := execCluster{procs: map[string]*instance{}}
	etcd := etcdtest.Start(t, 1)
	ec.endpoint = etcd.Endpoint(0)
	url := benchtest.PostgresDB(t)
	mk := func(name string) config {
		return config{instance: name, endpoints: []string{etcd.Endpoint(0)}, jobs: jobs}
	}
	env := dbEnv(migrate(t, writeConfig(t, mk("migrator")), url))
	ec.env = env
	for _, name := range []string{"server-a", "server-b"} {
		ec.procs[name] = start(t, mk(name), env)
		ec.procs[name].waitReady()
	}
	return ec
}

// No process of a program outlives its term even when snip-jobs itself
// cannot stop it: the leader's snip-jobs frozen (SIGSTOP) for twice the TTL,
// or SIGKILLed, while its program's tree runs — a setsid child and a
// double-forked daemon, deaf to SIGTERM. Its supervisor kills the tree (at
// the term's deadline; at once when snip-jobs dies), so when the other
// instance's program starts, after the lease expired, no process of the
// first is alive. On both backends.
func TestAProgramDiesWithItsTermWhenSnipJobsIsFrozenOrKilled(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"etcd", "kubernetes"} {
		for _, fault := range []string{"SIGSTOP", "SIGKILL"} {
			t.Run(backend+"/"+fault, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				ec := startExecCluster(t, backend, watcherJob(exectest.Watcher(t, dir)))
				eventually(t, "the first program started", func() bool { return len(exectest.Starts(t, dir)) == 1 })
				first := exectest.Starts(t, dir)[0]
				victim := ec.procs[first.Instance]
				switch fault {
				case "SIGSTOP":
					victim.signal(syscall.SIGSTOP)
					time.Sleep(4 * time.Second) // twice the TTL: the fault is the pause
				case "SIGKILL":
					victim.signal(syscall.SIGKILL)
					victim.wait()
				}
				eventually(t, "the other instance's program started", func() bool {
					s := exectest.Starts(t, dir)
					return len(s) >= 2 && s[len(s)-1].Instance != first.Instance
				})
				if o, err := exectest.Overlaps(dir); err != nil || len(o) > 0 {
					t.Errorf("after %s of the leader's snip-jobs, processes of its program were alive when the successor's started: %q (%v)", fault, o, err)
				}
				if fault == "SIGSTOP" {
					victim.signal(syscall.SIGCONT)
				}
			})
		}
	}
}
