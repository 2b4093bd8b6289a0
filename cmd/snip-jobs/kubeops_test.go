package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/childproc"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/kubetest"
)

// kubeOps is an operator's view of a cluster of snip-jobs processes on
// Kubernetes Leases (a namespace of the shared kube-apiserver) and
// PostgreSQL, all running one jobs list: it starts and restarts them, runs
// the control commands, and reads the Leases and the database.
type kubeOps struct {
	t     *testing.T
	kube  kubeCluster
	url   string   // the database as its superuser: the test's own reads
	env   []string // the runtime role's URL: the instances' and the commands'
	jobs  string
	ctl   string // the commands' config file (instance "operator")
	procs map[string]*instance
}

// newKubeOps migrates a fresh database for jobs and runs setup (SQL: the
// jobs' own tables, granted to the runtime role) as its superuser.
func newKubeOps(t *testing.T, jobs, setup string) *kubeOps {
	t.Helper()
	o := &kubeOps{t: t, kube: startKube(t), url: benchtest.PostgresDB(t), jobs: jobs, procs: map[string]*instance{}}
	o.ctl = writeConfig(t, o.config("operator"))
	o.env = dbEnv(migrate(t, o.ctl, o.url))
	if setup != "" {
		dbtest.Exec(t, o.url, setup)
	}
	return o
}

func (o *kubeOps) config(name string) config {
	return config{instance: name, kube: o.kube.section, jobs: o.jobs}
}

// start starts `snip-jobs run` as name (again) and waits until it is ready.
func (o *kubeOps) start(name string, args ...string) *instance {
	o.t.Helper()
	in := start(o.t, o.config(name), o.env, args...)
	in.waitReady()
	o.procs[name] = in
	return in
}

// restart stops name with SIGTERM (it must exit 0) and starts it again.
func (o *kubeOps) restart(name string, args ...string) {
	o.t.Helper()
	o.procs[name].signal(syscall.SIGTERM)
	if code := o.procs[name].wait(); code != 0 {
		o.t.Fatalf("%s exited with %d after SIGTERM", name, code)
	}
	o.start(name, args...)
}

// run runs a snip-jobs command with the commands' config.
func (o *kubeOps) run(args ...string) result {
	o.t.Helper()
	return snip(o.t, o.env, append(args, "--config", o.ctl)...)
}

// leader is who holds job's Lease ("" when nobody does) and the token
// written with it.
func (o *kubeOps) leader(job string) (instance string, token int64) {
	o.t.Helper()
	holder, ann, _ := o.kube.lease(o.t, kubePrefix+"-job-"+job)
	instance, _, _ = strings.Cut(holder, "/")
	token, _ = strconv.ParseInt(ann["jobs.snip.dev/token"], 10, 64)
	return instance, token
}

// leads counts the jobs each instance holds the Lease of.
func (o *kubeOps) leads(jobs []string) map[string]int {
	o.t.Helper()
	n := map[string]int{}
	for _, job := range jobs {
		if in, _ := o.leader(job); in != "" {
			n[in]++
		}
	}
	return n
}

// waitLeases waits until cond holds, woken by each change of the
// namespace's Leases (a watch): a term won or ended, a Lease renewed.
func (o *kubeOps) waitLeases(what string, cond func() bool) {
	o.t.Helper()
	kubetest.WaitLeases(o.t, o.kube.cs.CoordinationV1(), o.kube.ns, what, cond)
}

// waitRenewals waits until the instance Lease of every running instance
// has been renewed n times (each renewal is a change the watch reports; two
// between reads count as one, which only waits longer): n renew intervals
// of each, by its own renewals.
func (o *kubeOps) waitRenewals(n int) {
	o.t.Helper()
	seen := map[string]map[string]bool{}
	o.waitLeases(fmt.Sprintf("%d renewals of each instance Lease", n), func() bool {
		enough := true
		for name, in := range o.procs {
			if !in.running() {
				continue
			}
			l, err := o.kube.cs.CoordinationV1().Leases(o.kube.ns).Get(context.Background(), kubePrefix+"-instance-"+name, metav1.GetOptions{})
			if err != nil || l.Spec.RenewTime == nil {
				return false
			}
			if seen[name] == nil {
				seen[name] = map[string]bool{}
			}
			seen[name][l.Spec.RenewTime.String()] = true
			enough = enough && len(seen[name]) > n
		}
		return enough
	})
}

// count runs a query returning one number, as the database's superuser.
func (o *kubeOps) count(query string, args ...any) int {
	o.t.Helper()
	var n int
	o.scan(query, args, &n)
	return n
}

// scan runs a query returning one row, as the database's superuser, into
// dest.
func (o *kubeOps) scan(query string, args []any, dest ...any) {
	o.t.Helper()
	conn, err := pgx.Connect(context.Background(), o.url)
	if err != nil {
		o.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), query, args...).Scan(dest...); err != nil {
		o.t.Fatalf("%s: %v", query, err)
	}
}

// waitCommit waits until cond holds, woken by each commit to one of tables.
func (o *kubeOps) waitCommit(what string, tables []string, cond func() bool) {
	o.t.Helper()
	dbtest.WaitCommit(o.t, o.url, what, tables, cond)
}

// call is a snip-jobs command running in the background: its output line
// by line as it prints it, and its result once it exits.
type call struct {
	t     *testing.T
	lines chan string
	done  chan result
}

// runAsync starts a snip-jobs command with the commands' config; it is
// killed at the end of the test if it still runs.
func (o *kubeOps) runAsync(args ...string) *call {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	o.t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, binary, append(args, "--config", o.ctl)...)
	cmd.Env = childproc.Env(o.env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		o.t.Fatal(err)
	}
	c := &call{t: o.t, lines: make(chan string, 64), done: make(chan result, 1)}
	go func() {
		var all strings.Builder
		for sc := bufio.NewScanner(out); sc.Scan(); {
			all.WriteString(sc.Text() + "\n")
			c.lines <- sc.Text()
		}
		_ = cmd.Wait()
		c.done <- result{code: cmd.ProcessState.ExitCode(), stdout: all.String(), stderr: stderr.String()}
	}()
	return c
}

// line is the command's next line of output.
func (c *call) line() string {
	c.t.Helper()
	select {
	case l := <-c.lines:
		return l
	case <-time.After(waitLong):
		c.t.Fatal("a command printed nothing")
	}
	return ""
}

// wait waits for the command to exit.
func (c *call) wait() result {
	c.t.Helper()
	select {
	case r := <-c.done:
		return r
	case <-time.After(waitLong):
		c.t.Fatal("a command did not exit")
	}
	return result{}
}
