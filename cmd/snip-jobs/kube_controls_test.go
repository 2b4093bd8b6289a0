package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// The operators' controls (issue 32) on Kubernetes Leases, with the
// commands an operator runs, against snip-jobs processes on a real
// kube-apiserver and PostgreSQL. The scheduler's own tests show the same on
// both backends in one process (scheduler/controls_test.go,
// scheduler/manual_test.go); these add the commands, which read the Leases
// to wait for hand-overs, and real processes killed and restarted.

// `snip-jobs pause` on Kubernetes Leases ends the leader's term: the command
// waits for it (reading the job Lease) and names it, and the term is
// recorded ended "paused"; no instance leads or runs the job, nor starts a
// term, for three renewals of every instance Lease, nor after every
// instance was restarted; status shows who paused it. `resume` has it led
// again with a higher token, and `history` lists the runs of both terms.
func TestPauseOnKubernetesHoldsTheJobAcrossRestartsUntilResumed(t *testing.T) {
	t.Parallel()
	o := newKubeOps(t, pulseJob, "")
	for _, name := range []string{"server-a", "server-b"} {
		o.start(name)
	}
	waitPulses(t, o.url, "a pulse", func() bool { return len(pulses(t, o.url)) > 0 })

	// The term the command names is checked against the term recorded ended
	// "paused", not against the job Lease read before: a Lease that lapses
	// under load in between has the job won again with a new token.
	r := o.run("pause", "pulse", "--by", "alice@web1", "--reason", "backfill running")
	m := regexp.MustCompile(`^pulse: paused by alice@web1: "backfill running"\npulse: (server-[ab]) \(token (\d+)\) handed it over\n` +
		`pulse: no instance runs it until 'snip-jobs resume pulse'\n$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("pause: exit %d\n%s%s\nwant it to name the leader's term that it ended", r.code, r.stdout, r.stderr)
	}
	leader := m[1]
	token, _ := strconv.ParseInt(m[2], 10, 64)
	o.waitCommit(fmt.Sprintf("%s's term %d recorded ended paused", leader, token), []string{"job_terms"}, func() bool {
		return o.count(`SELECT count(*) FROM job_terms WHERE job = 'pulse' AND token = $1 AND instance = $2 AND reason = 'paused'`, token, leader) == 1
	})
	rows, terms := len(pulses(t, o.url)), o.count(`SELECT count(*) FROM job_terms WHERE job = 'pulse'`)
	stillPaused := func(when string) { t.Helper(); checkPaused(t, o, when, rows, terms) }
	stillPaused("after the pause")
	for _, name := range []string{"server-a", "server-b"} {
		o.restart(name)
	}
	stillPaused("after every instance restarted")

	r = o.run("resume", "pulse", "--by", "bob@web2")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "pulse: resumed (paused by alice@web1 for ") {
		t.Fatalf("resume: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var next pulse
	waitPulses(t, o.url, "a pulse after the resume", func() bool {
		ps := pulses(t, o.url)
		next = ps[len(ps)-1]
		return len(ps) > rows
	})
	if next.token <= token {
		t.Errorf("after the resume %s leads with token %d, not above the paused term's %d", next.instance, next.token, token)
	}
	checkPulses(t, pulses(t, o.url))
	r = o.run("history", "pulse", "--limit", "1000")
	for _, term := range []pulse{{instance: leader, token: token}, next} {
		if len(linesWith(r.stdout, "schedule", term.instance, fmt.Sprint(term.token), "ok")) == 0 {
			t.Errorf("history does not list the runs of %s's term %d:\n%s%s", term.instance, term.token, r.stdout, r.stderr)
		}
	}
}

// checkPaused checks, after three renewals of every instance Lease, that
// nobody leads pulse, that it has written no pulse beyond rows nor started a
// term beyond terms, and that status shows it paused by alice@web1.
func checkPaused(t *testing.T, o *kubeOps, when string, rows, terms int) {
	t.Helper()
	o.waitRenewals(3)
	if in, _ := o.leader("pulse"); in != "" {
		t.Errorf("%s: %s leads the paused job", when, in)
	}
	if n := len(pulses(t, o.url)); n != rows {
		t.Errorf("%s: %d pulses written while paused", when, n-rows)
	}
	if n := o.count(`SELECT count(*) FROM job_terms WHERE job = 'pulse'`); n != terms {
		t.Errorf("%s: %d terms started while paused", when, n-terms)
	}
	st := kubeStatus(t, o.env, o.procs["server-a"])
	if p := st.Jobs[0].Paused; p == nil || p.By != "alice@web1" || p.Reason != "backfill running" || st.Jobs[0].Leader != nil {
		t.Errorf("%s: status --json shows pulse paused %+v, led by %+v", when, p, st.Jobs[0].Leader)
	}
}

// beaconJob is a singleton whose runs of the schedule write nothing and
// whose manual runs write one row (instance, token, manual run) in the
// term's fenced transaction, after waiting there for the test's gate (a
// shared advisory lock, which the test holds exclusively to keep the run in
// its transaction).
const beaconJob = `
  - name: beacon
    type: sql
    singleton: true
    every: 1h
    grace: 2s
    options:
      statement: >-
        INSERT INTO beacons (instance, token, manual_run) SELECT @instance, @token, @manual_run
        WHERE CASE WHEN @trigger = 'manual' THEN (SELECT true FROM pg_advisory_xact_lock_shared(7321)) ELSE false END
`

const beaconsTable = `CREATE TABLE beacons (id bigserial PRIMARY KEY, instance text NOT NULL, token bigint NOT NULL, manual_run bigint NOT NULL);
GRANT SELECT, INSERT ON beacons TO snip_jobs; GRANT USAGE ON SEQUENCE beacons_id_seq TO snip_jobs`

// gate holds the beacon's gate until the returned function is called.
func (o *kubeOps) gate() (open func()) {
	o.t.Helper()
	conn, err := pgx.Connect(context.Background(), o.url)
	if err == nil {
		_, err = conn.Exec(context.Background(), `SELECT pg_advisory_lock(7321)`)
	}
	if err != nil {
		o.t.Fatal(err)
	}
	o.t.Cleanup(func() { conn.Close(context.Background()) })
	return func() { conn.Close(context.Background()) }
}

// Three operators run `snip-jobs run beacon --wait` at once on Kubernetes
// Leases: one manual run, the two later calls joined to it, run once by the
// leader with its term's token, once in the history; every caller prints
// the same outcome. Then the leader is SIGKILLed while its manual run sits
// in its fenced transaction: the survivor takes the job over, claims the
// request again, and its fence ends the dead leader's transaction (its
// write is refused: no row of its token); the run completes once, and the
// operator's `run --wait` prints the survivor's outcome, claimed twice.
func TestManualRunsOnKubernetesRunOnceAlsoWhenTheLeaderIsKilled(t *testing.T) {
	t.Parallel()
	o := newKubeOps(t, beaconJob, beaconsTable)
	for _, name := range []string{"server-a", "server-b"} {
		o.start(name)
	}
	o.waitLeases("a leader", func() bool { in, _ := o.leader("beacon"); return in != "" })
	first, outcome := runConcurrently(t, o, 3)
	// The leader that ran it is the term its fenced write names (not the
	// job Lease read before: under load a 2 s Lease lapses, and the job is
	// won again with a new token, in between).
	leader, token, _ := beacon(t, o, first)
	want := fmt.Sprintf("beacon: manual run %d done on %s (token %d) in ", first, leader, token)
	if !strings.HasPrefix(outcome, want) || !strings.HasSuffix(outcome, ": ok") {
		t.Errorf("%q; want it done by the leader whose term wrote its row, ok: %q", outcome, want)
	}
	o.waitCommit("the manual run's end recorded", []string{"job_runs"}, func() bool {
		return o.count(`SELECT count(*) FROM job_runs WHERE job = 'beacon' AND trigger = 'manual' AND result = 'ok'`) == 1
	})
	r := o.run("history", "beacon")
	lines := linesWith(r.stdout, "manual", leader, fmt.Sprint(token), "ok")
	if len(lines) != 1 {
		t.Fatalf("history lists %d manual runs by %s's term %d, want 1:\n%s%s", len(lines), leader, token, r.stdout, r.stderr)
	}
	// The command and the history say the same of how long it took.
	if took, cells := strings.TrimSuffix(strings.TrimPrefix(outcome, want), ": ok"), strings.Fields(lines[0]); len(cells) < 2 || cells[1] != took {
		t.Errorf("run --wait says the run took %q, history %q", took, lines[0])
	}

	open := o.gate()
	c := o.runAsync("run", "beacon", "--wait", "--by", "carol@web3")
	var second int64
	l := c.line()
	if _, err := fmt.Sscanf(l, "beacon: manual run %d asked for by carol@web3", &second); err != nil || second <= first {
		t.Fatalf("run --wait: %q", l)
	}
	eventually(t, "the leader's run waiting at the gate, in its fenced transaction (PostgreSQL signals no lock wait)", func() bool {
		return o.count(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 7321 AND NOT granted`) == 1
	})
	o.scan(`SELECT instance, token FROM manual_runs WHERE id = $1`, []any{second}, &leader, &token)
	survivor := killLeader(t, o, leader) // the leader whose run waits at the gate
	o.waitCommit("the survivor's claim of the request", []string{"manual_runs"}, func() bool {
		return o.count(`SELECT count(*) FROM manual_runs WHERE id = $1 AND attempts = 2 AND instance = $2`, second, survivor.name) == 1
	})
	eventually(t, "the dead leader's transaction ended by the survivor's fence", func() bool {
		m, err := benchtest.ScrapeMetrics(context.Background(), survivor.admin)
		return err == nil && m.Sum("snip_jobs_fence_stale_holders_ended_total") >= 1
	})
	open()
	res := c.wait()
	by, now, n := beacon(t, o, second)
	want = fmt.Sprintf("beacon: manual run %d done on %s (token %d) in ", second, survivor.name, now)
	if res.code != 0 || !strings.Contains(res.stdout, want) || !strings.Contains(res.stdout, "(claimed 2 times: an earlier claimer stopped before it was over)") {
		t.Errorf("run --wait across the kill: exit %d, want %q, claimed twice:\n%s%s", res.code, want, res.stdout, res.stderr)
	}
	if n != 1 || by != survivor.name || now <= token {
		t.Errorf("manual run %d wrote %d rows, by %s's term %d; want one, by %s's term after the killed leader's %d", second, n, by, now, survivor.name, token)
	}
}

// beacon is the term (instance, token) whose fenced write manual run id
// made, and the number of rows it wrote.
func beacon(t *testing.T, o *kubeOps, id int64) (instance string, token int64, rows int) {
	t.Helper()
	o.scan(`SELECT coalesce(min(instance), ''), coalesce(min(token), 0), count(*) FROM beacons WHERE manual_run = $1`, []any{id}, &instance, &token, &rows)
	return instance, token, rows
}

// runConcurrently runs `run beacon --wait` n times at once, holding the
// run in its transaction until every call has said which run it asked for
// or joined; it checks that they name one run, asked for once
// and joined by the others, run once, with the same outcome printed by
// each, and returns the run's id and that outcome.
func runConcurrently(t *testing.T, o *kubeOps, n int) (int64, string) {
	t.Helper()
	open := o.gate()
	var calls []*call
	for i := range n {
		calls = append(calls, o.runAsync("run", "beacon", "--wait", "--by", fmt.Sprintf("op-%d@web1", i)))
	}
	var firsts []string
	for _, c := range calls {
		firsts = append(firsts, c.line())
	}
	open()
	var outcomes []string
	for _, c := range calls {
		r := c.wait()
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 {
			t.Errorf("run --wait: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		outcomes = append(outcomes, lines[len(lines)-1])
	}
	said := strings.Join(firsts, "\n")
	var asked []string
	for _, l := range firsts {
		if strings.HasPrefix(l, "beacon: manual run ") {
			asked = append(asked, l)
		}
	}
	var id int64
	if len(asked) == 1 {
		fmt.Sscanf(asked[0], "beacon: manual run %d asked for", &id)
	}
	joined := linesWith(said, fmt.Sprintf("beacon: joined manual run %d,", id))
	if id == 0 || len(joined) != n-1 || slices.ContainsFunc(outcomes, func(l string) bool { return l != outcomes[0] }) {
		t.Fatalf("%d concurrent runs said first:\n%s\nand at the end:\n%s\nwant one asked for, the others joined, one outcome", n,
			said, strings.Join(outcomes, "\n"))
	}
	if rows, runs := o.count(`SELECT count(*) FROM beacons WHERE manual_run = $1`, id),
		o.count(`SELECT count(*) FROM job_runs WHERE job = 'beacon' AND trigger = 'manual'`); rows != 1 || runs != 1 {
		t.Errorf("manual run %d wrote %d rows in %d recorded runs; want one", id, rows, runs)
	}
	return id, outcomes[0]
}

// killLeader SIGKILLs the leader and returns the other instance.
func killLeader(t *testing.T, o *kubeOps, leader string) *instance {
	t.Helper()
	o.procs[leader].signal(syscall.SIGKILL)
	if code := o.procs[leader].wait(); code != -1 {
		t.Fatalf("%s exit status %d after SIGKILL", leader, code)
	}
	for name, in := range o.procs {
		if name != leader {
			return in
		}
	}
	return nil
}

// drainJobs are four singletons and a job that runs everywhere, each
// recording its runs (job, instance, token) every second.
var drainJobs = func() string {
	var b strings.Builder
	for _, job := range []string{"job-0", "job-1", "job-2", "job-3", "warmer"} {
		fmt.Fprintf(&b, `
  - name: %s
    type: sql
    singleton: %v
    every: 1s
    grace: 2s
    options:
      statement: INSERT INTO ran (job, instance, token) VALUES (@job, @instance, @token)
`, job, job != "warmer")
	}
	return b.String()
}()

var singletons = []string{"job-0", "job-1", "job-2", "job-3"}

const ranTable = `CREATE TABLE ran (id bigserial PRIMARY KEY, job text NOT NULL, instance text NOT NULL, token bigint NOT NULL);
GRANT SELECT, INSERT ON ran TO snip_jobs; GRANT USAGE ON SEQUENCE ran_id_seq TO snip_jobs`

// `snip-jobs drain --instance server-a` on Kubernetes Leases: server-a
// hands every singleton it leads over (the command names each, with its
// token, once the job Leases no longer name server-a; the terms are recorded
// ended "drained") and leads none for three renewals of every instance
// Lease, nor after it was restarted, while its job that runs everywhere
// goes on. `undrain` gives it its share back (two each); so does starting
// it with `run --undrain` after another drain.
func TestDrainOnKubernetesHandsEverySingletonOverAndTakesNoneBack(t *testing.T) {
	t.Parallel()
	o := newKubeOps(t, drainJobs, ranTable)
	for _, name := range []string{"server-a", "server-b"} {
		o.start(name)
	}
	o.waitShare()
	drain(t, o)
	o.waitLeases("server-b to lead every singleton", func() bool { return o.leads(singletons)["server-b"] == 4 })
	o.waitCommit("server-a's two terms recorded ended drained", []string{"job_terms"}, func() bool {
		return o.count(`SELECT count(*) FROM job_terms WHERE instance = 'server-a' AND reason = 'drained'`) == 2
	})
	stillDrained := func(when string) {
		t.Helper()
		warmed := o.count(`SELECT count(*) FROM ran WHERE job = 'warmer' AND instance = 'server-a'`)
		o.waitRenewals(3)
		// All by server-b, once it holds them again if its Lease lapsed
		// under load; none by server-a, ever.
		o.waitLeases(when+": every singleton led by server-b", func() bool {
			n := o.leads(singletons)
			if n["server-a"] != 0 {
				t.Fatalf("%s: the singletons are led %v; want none by server-a", when, n)
			}
			return n["server-b"] == 4
		})
		o.waitCommit(when+": server-a's job that runs everywhere to go on", []string{"ran"}, func() bool {
			return o.count(`SELECT count(*) FROM ran WHERE job = 'warmer' AND instance = 'server-a'`) > warmed
		})
	}
	stillDrained("drained")
	o.restart("server-a")
	stillDrained("drained, after a restart")

	r := o.run("undrain", "--instance", "server-a")
	if r.code != 0 || !strings.HasPrefix(r.stdout, `server-a: undrained (drained by alice@web1 for `) {
		t.Fatalf("undrain: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	o.waitShare()

	drain(t, o)
	o.restart("server-a", "--undrain")
	o.waitShare()
	for _, job := range singletons {
		checkTokens(t, o, job)
	}
}

// drain drains server-a and checks what the command says: every job it
// led handed over, with the token of its term. Which terms those are is read
// from what server-a recorded, not from the job Leases before the drain: an
// instance Lease that lapses under load between that read and the drain has
// server-a win its jobs again with new tokens (seen at -p=3). Each term named
// must be server-a's, recorded ended "drained", and no other may be.
func drain(t *testing.T, o *kubeOps) {
	t.Helper()
	const drained = `SELECT count(*) FROM job_terms WHERE instance = 'server-a' AND reason = 'drained'`
	before := o.count(drained)
	r := o.run("drain", "--instance", "server-a", "--by", "alice@web1", "--reason", "kernel upgrade")
	var jobs []string
	var tokens []int64
	for _, m := range regexp.MustCompile(`(?m)^(job-\d): server-a \(token (\d+)\) handed it over$`).FindAllStringSubmatch(r.stdout, -1) {
		token, _ := strconv.ParseInt(m[2], 10, 64)
		jobs, tokens = append(jobs, m[1]), append(tokens, token)
	}
	var handed strings.Builder
	for i, job := range jobs {
		fmt.Fprintf(&handed, "%s: server-a (token %d) handed it over\n", job, tokens[i])
	}
	want := "server-a: drained by alice@web1: \"kernel upgrade\"\n" + handed.String() +
		"server-a: leads no singleton until 'snip-jobs undrain --instance server-a' (or 'snip-jobs run --undrain' there)\n"
	if r.code != 0 || len(jobs) == 0 || r.stdout != want {
		t.Fatalf("drain: exit %d\n%s%s\nwant:\n%s(with a line for each job server-a led)", r.code, r.stdout, r.stderr, want)
	}
	o.waitCommit(fmt.Sprintf("the terms drain named (%v, tokens %v) recorded as server-a's, ended drained", jobs, tokens), []string{"job_terms"}, func() bool {
		return o.count(drained+` AND (job, token) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))`, jobs, tokens) == len(jobs)
	})
	if n := o.count(drained) - before; n != len(jobs) {
		t.Fatalf("server-a recorded %d terms ended drained; drain named %d:\n%s", n, len(jobs), r.stdout)
	}
}

// waitShare waits until the spread gives each instance two singletons.
func (o *kubeOps) waitShare() {
	o.t.Helper()
	o.waitLeases("two singletons each", func() bool {
		n := o.leads(singletons)
		return n["server-a"] == 2 && n["server-b"] == 2
	})
}

// checkTokens checks the fencing invariants over job's rows: in commit
// order tokens never go down, and each token is one instance's.
func checkTokens(t *testing.T, o *kubeOps, job string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), o.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(context.Background(), `SELECT id, instance, token FROM ran WHERE job = $1 ORDER BY id`, job)
	var ps []pulse
	var p pulse
	if _, err := pgx.ForEachRow(rows, []any{&p.id, &p.instance, &p.token}, func() error { ps = append(ps, p); return nil }); err != nil {
		t.Fatal(err)
	}
	checkPulses(t, ps)
}

// An instance paused past its lease (SIGSTOP, as a long GC pause or a
// suspended VM would) finds its lease expired when it resumes, and says so
// once: not also that a renewal failed, which the lease's end interrupted.
// On both backends.
func TestAResumedInstanceSaysItsLeaseExpiredAndNoRenewalFailed(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"etcd", "kubernetes"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var cfg config
			var env []string
			if backend == "kubernetes" {
				o := newKubeOps(t, beaconJob, beaconsTable)
				cfg, env = o.config("server-a"), o.env
			} else {
				etcd := etcdtest.Start(t, 1)
				cfg = config{instance: "server-a", endpoints: []string{etcd.Endpoint(0)}, jobs: beaconJob}
				url := benchtest.PostgresDB(t)
				env = dbEnv(migrate(t, writeConfig(t, cfg), url))
				dbtest.Exec(t, url, beaconsTable)
			}
			in := start(t, cfg, env)
			in.waitReady()
			in.signal(syscall.SIGSTOP)
			time.Sleep(3 * time.Second) // past the 2 s TTL: the pause is what is tested
			in.signal(syscall.SIGCONT)
			eventually(t, "the resumed instance to find its lease ended and open another", func() bool {
				l := in.logs()
				i := strings.Index(l, "lease ended")
				return i >= 0 && strings.Contains(l[i:], "expired") && strings.Contains(l[i:], "lease granted")
			})
			if l := in.logs(); strings.Contains(l, "renewal of the instance Lease failed") || strings.Contains(l, "keep-alive failed") {
				t.Errorf("the resumed instance logged a failed renewal beside its lease's expiry:\n%s", l)
			}
		})
	}
}
