package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// `snip-jobs reclaim`, systemd's ExecStopPost=: after the leader was
// SIGKILLed, it revokes the dead process's lease and the job moves at once,
// long before the 10 s lease would have expired. Run while the process lives,
// it leaves the lease alone and exits 1; run again after the reclaim, it has
// nothing to do.
func TestReclaimAfterSIGKILLMovesTheJobAtOnceAndLeavesARunningProcessAlone(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	observer := etcdClient(t, etcd.Endpoint(0))
	url := benchtest.PostgresDB(t)
	env := dbEnv(url)
	mk := func(name string) config {
		return config{instance: name, endpoints: []string{etcd.Endpoint(0)}, jobs: pulseJob, ttl: "ttl: 10s\n  margin: 3s"}
	}
	migrate(t, writeConfig(t, mk("migrator")), url)
	procs := map[string]*instance{}
	for _, name := range []string{"server-a", "server-b"} {
		procs[name] = start(t, mk(name), env)
	}
	for _, p := range procs {
		p.waitReady()
	}
	first := leaderOf(t, observer, "pulse", 0)
	leader := procs[first.Instance]

	r := snip(t, env, "reclaim", "--config", leader.config)
	if r.code != 1 || !strings.Contains(r.stderr, "lease left alone") || !strings.Contains(r.stderr, fmt.Sprint(leader.proc.Pid())) {
		t.Fatalf("reclaim while %s runs: exit %d\n%s", leader.name, r.code, r.stderr)
	}
	if now := leaderOf(t, observer, "pulse", 0); now.Token != first.Token {
		t.Fatalf("the job moved (token %d → %d) when reclaim was run for a running process", first.Token, now.Token)
	}

	ttl, err := observer.TimeToLive(context.Background(), first.Lease)
	if err != nil {
		t.Fatal(err)
	}
	expiresBy := time.Now().Add(time.Duration(ttl.TTL) * time.Second) // had nobody revoked it
	leader.signal(syscall.SIGKILL)
	leader.wait()
	r = snip(t, append(env, "SERVICE_RESULT=signal", "EXIT_CODE=killed", "EXIT_STATUS=KILL"), "reclaim", "--config", leader.config)
	if r.code != 0 || !strings.Contains(r.stderr, "revoked its lease") || !strings.Contains(r.stderr, `"SERVICE_RESULT":"signal"`) ||
		!strings.Contains(r.stderr, "recorded in the history") {
		t.Fatalf("reclaim after SIGKILL: exit %d\n%s", r.code, r.stderr)
	}
	// The history says why the dead process's term ended, whoever closed it
	// first (the successor may have, the moment the lease was revoked).
	db, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var reason, by string
	if err := db.QueryRow(context.Background(), `SELECT coalesce(reason, ''), coalesce(ended_by, '') FROM job_terms
		WHERE job = 'pulse' AND token = $1`, first.Token).Scan(&reason, &by); err != nil || reason != "reclaimed" || by != "reclaim" {
		t.Errorf("the killed leader's term in job_terms: reason %q, ended by %q (%v); want reclaimed, by reclaim", reason, by, err)
	}
	second := leaderOf(t, observer, "pulse", first.Token)
	if second.Instance == first.Instance {
		t.Fatal("the killed instance leads")
	}
	if !time.Now().Before(expiresBy) {
		t.Fatal("the job moved only when the killed leader's lease would have expired")
	}
	if ttl, err := observer.TimeToLive(context.Background(), first.Lease); err != nil || ttl.TTL != -1 {
		t.Fatalf("the killed leader's lease: %v, %v; want it revoked", ttl, err)
	}

	r = snip(t, env, "reclaim", "--config", leader.config)
	if r.code != 0 || !strings.Contains(r.stderr, "nothing to do") {
		t.Fatalf("a second reclaim: exit %d\n%s", r.code, r.stderr)
	}
}
