package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/app/sockact"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/jobs/execjob/supervisor"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/leadership/etcdlease/layout"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
	"github.com/snip/snip-jobs/testbench/exectest"
	"github.com/snip/snip-jobs/testbench/flock"
	"github.com/snip/snip-jobs/testbench/systemdtest"
)

// What the unit test installs in the container, and where the unit and its
// config say the files are.
const (
	unitDir         = "../../deploy/systemd"
	unitName        = "snip-jobs.service"
	socketName      = "snip-jobs-challenge.socket"
	credentialsDir  = "/run/credentials/" + unitName
	unitInstance    = "unit-1" // the instance under systemd, in the container
	hostInstance    = "host-1" // its peer, a plain process on the host
	rootfsPatience  = 20 * time.Minute
	msgUnitStarted  = "39f53479d3a045ac8e11786248231fbf" // systemd's MESSAGE_ID: a start job finished (READY=1 for Type=notify)
	challengeDomain = "shop.example.com"
)

// unitJobs are the jobs both instances run. Singletons: the pulse through
// the fence; a certificate renewer whose keys come from keys (key_file or
// key_env) and whose HTTP-01 listener is the passed socket (with no domains
// it never asks a CA, and its directory would refuse anyway); the exec
// watcher (watcher: its command on that instance, see unitWatcher). And the
// program, everywhere. The watcher comes last: the spread hands over the
// first job in the config its instance may hand over, so the watcher moves
// only when the others do not (or an operator resigns it).
func unitJobs(keys string, watcher []string) string {
	return pulseJob + programJob + `
  - name: cert-renewer
    type: certrenew
    singleton: true
    every: 1h
    options:
      directory: https://127.0.0.1:9/directory
      ` + keys + "\n" + watcherJob(watcher)
}

// programJob runs everywhere (the spread of the singletons is unchanged): its
// program says whether it could read the unit's database URL credential,
// then sleeps through its instance's life.
const programJob = `
  - name: program
    type: exec
    singleton: false
    every: 1s
    options:
      command: ["/bin/sh", "-c", "if cat ` + credentialsDir + `/database-url >/dev/null 2>&1; then echo credentials readable; else echo credentials refused; fi; exec sleep 3600"]
`

// The units in deploy/systemd, installed unchanged (drop-ins add the
// credentials and shorten the watchdog) in a Debian container whose
// PID 1 is a real systemd, with the freshly built binary and a config in the
// files the unit reads; an instance on the host runs the same jobs. Against
// systemd itself: start waits for READY=1 and status shows the service's
// line; the secrets arrive through LoadCredential= readable by the dynamic
// user alone; port 80 comes from the socket unit and answers HTTP-01, also
// while the service restarts; SIGKILL → ExecStopPost='s reclaim moves the jobs
// at once; SIGSTOP → the watchdog restarts it and the jobs move; stop resigns
// and exits cleanly within TimeoutStopSec, and port 80 stays the socket's (a
// request on it starts the service again). An exec job's program runs
// under the unit's sandbox, cannot read the credentials, and dies with each
// service that started it; a stopped service ends them all itself. A
// singleton exec job's program (a setsid'd child and a daemon in its tree)
// dies at its term's deadline while the service is frozen (SIGSTOP, the
// watchdogs off), by its supervisor alone: gone when the term's lease
// expires, before the host's program of the next term starts; resumed, the
// service recovers by itself. Through all of it the fence refused only
// writes of terms a newer one had replaced.
func TestTheUnitUnderARealSystemd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cache := cacheDir(t)
	begin := time.Now()
	rctx, cancel := context.WithTimeout(ctx, rootfsPatience)
	root, err := systemdtest.Rootfs(rctx, cache)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("root file system %s ready in %v", root, time.Since(begin).Round(time.Millisecond))
	holdPort80(t, cache)

	etcd := etcdtest.Start(t, 1)
	observer := etcdClient(t, etcd.Endpoint(0))
	url := benchtest.PostgresDB(t)
	keys := randomKey(t)
	ttl := "ttl: 10s\n  margin: 3s"
	hostRecords := t.TempDir() // the host's watcher's
	hostWatcher, err := exectest.Program(hostRecords, watcherLoop)
	if err != nil {
		t.Fatal(err)
	}
	hostCfg := config{instance: hostInstance, endpoints: []string{etcd.Endpoint(0)}, ttl: ttl,
		jobs:   unitJobs("key_env: SNIP_TEST_CERT_KEY", hostWatcher),
		passed: []sockact.Socket{{Name: certrenew.ChallengeSocket, Listener: benchtest.Listen(t)}}} // not port 80: the unit's
	hostPath := writeConfig(t, hostCfg)
	runtime := migrate(t, hostPath, url)
	singletons := ledJobs(t, hostPath)
	unitCfg, err := os.ReadFile(writeConfig(t, config{instance: unitInstance, endpoints: []string{etcd.Endpoint(0)}, ttl: ttl,
		urlFile: credentialsDir + "/database-url",
		jobs:    unitJobs("key_file: "+credentialsDir+"/certificate-keys", []string{unitWatcher, unitRecords})}))
	if err != nil {
		t.Fatal(err)
	}

	u := bootUnit(t, root, map[string]string{"database-url": runtime, "certificate-keys": keys}, unitCfg)

	// 1. start returns once READY=1: the instance holds its lease; status
	// shows the service's STATUS= line.
	u.run("systemctl", "start", unitName)
	show := u.show(unitName)
	if show["ActiveState"] != "active" || show["SubState"] != "running" || show["Type"] != "notify" {
		t.Fatalf("after systemctl start: %s %s (Type=%s)", show["ActiveState"], show["SubState"], show["Type"])
	}
	if lease := instanceLease(t, observer, unitInstance); lease == 0 {
		t.Fatal("systemctl start returned before the instance held an etcd lease")
	}
	status, _ := u.ct.Run(ctx, "systemctl", "status", "--no-pager", "--lines=0", unitName)
	if !regexp.MustCompile(`Status: "4 job\(s\), leading [0-3]"`).MatchString(status) {
		t.Errorf("systemctl status does not show the service's status line:\n%s", status)
	}
	for _, job := range singletons {
		if l := leaderOf(t, observer, job, 0); l.Instance != unitInstance {
			t.Fatalf("%s is led by %s, the only instance is %s", job, l.Instance, unitInstance)
		}
	}

	// 5. The secrets: LoadCredential= copies, the service's alone.
	u.checkCredentials(show["MainPID"], map[string]string{"database-url": runtime, "certificate-keys": keys})

	// 6. Port 80 is the socket unit's, passed to the service.
	u.journal.wait("the challenge listener on the passed socket", 0, processSays("serving HTTP-01 challenges", `"from":"passed socket"`))
	token := storeChallenge(t, url)
	if code, body := getChallenge(token, challengeDomain); code != http.StatusOK || body != token+".thumbprint" {
		t.Fatalf("HTTP-01 on port 80 with Host %s: %d %q", challengeDomain, code, body)
	}
	if code, _ := getChallenge(token, "other.example.com"); code != http.StatusNotFound {
		t.Fatalf("HTTP-01 on port 80 for another Host: %d, want 404", code)
	}

	// 7. The exec job's program: started by its supervisor under the
	// unit's sandbox, without the credentials.
	prog := u.program(0)

	host := start(t, hostCfg, append(dbEnv(runtime), "SNIP_TEST_CERT_KEY="+keys))
	host.waitReady()

	// 3. kill -9: ExecStopPost='s reclaim revokes the lease; the host leads
	// before the lease would have expired; a challenge request sent during
	// the restart waits in port 80's queue and is answered. The program
	// died with its service (KillMode=mixed: systemd's SIGKILL to the rest
	// of the unit as the main process dies, ahead of the supervisor's).
	mark := u.journal.len()
	u.supervisors("program", 2) // the run's, and a spare for the next
	u.crash(observer, settled(t, observer, singletons), token)
	u.programGone(prog, "SIGKILL of the service")
	prog = u.program(mark)

	// 8. A singleton exec job's program, frozen with its snip-jobs: its
	// supervisor kills its tree (a setsid'd child and a double-forked
	// daemon among it) at the term's deadline, before the host's program of
	// the job starts; resumed, the service recovers by itself.
	u.freeze(observer, singletons, hostRecords)

	// 2. The watchdog: a stopped process stops pinging; systemd restarts it;
	// its job moves to the host once its lease expires.
	mark = u.journal.len()
	u.stall(observer, settled(t, observer, singletons))
	u.programGone(prog, "the watchdog's restart")
	prog = u.program(mark)

	// 4. stop: the terms are resigned, the process exits 0 within
	// TimeoutStopSec; the socket keeps port 80, and a request on it starts the
	// service again until the socket is stopped too. The service stopped
	// its program and ended its supervisors before it exited: systemd
	// killed nothing.
	mark = u.journal.len()
	u.stop(observer, url, settled(t, observer, singletons), token)
	u.programGone(prog, "systemctl stop")
	u.leftNothing(mark, "systemctl stop")
	u.watchersNeverOverlapped(hostRecords)

	checkFence(t, url)
	checkPulses(t, pulses(t, url))
}

// unit is snip-jobs.service in a booted container.
type unit struct {
	t       *testing.T
	ct      *systemdtest.Container
	journal journal
}

// boot boots a container named name from root and follows the journal of
// the unit and its socket; the console and the journal are shown when the
// test failed.
func boot(t *testing.T, root, name string) *unit {
	t.Helper()
	ctx := context.Background()
	ct, err := systemdtest.Boot(ctx, root, name, filepath.Join(t.TempDir(), "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unit{t: t, ct: ct}
	t.Cleanup(func() {
		if err := ct.Close(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("--- the container's console ---\n%s", ct.Console())
		}
	})
	j, err := ct.Follow(ctx, unitName, socketName)
	if err != nil {
		t.Fatal(err)
	}
	u.journal = journal{t: t, j: j}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- journal of %s ---\n%s", unitName, lastLines(j.Dump(), 400))
		}
		j.Close()
	})
	return u
}

// bootUnit boots the container and installs by hand, as the unit's comment
// says: the binary, the unit files unchanged, a drop-in holding the
// LoadCredential= lines the unit documents for creds, the credentials'
// sources (root-only) and the config; then reloads systemd.
func bootUnit(t *testing.T, root string, creds map[string]string, cfg []byte) *unit {
	t.Helper()
	ctx := context.Background()
	u := boot(t, root, "snip-jobs-unit")
	bin, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	service := readUnit(t, unitName)
	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{"/usr/bin/snip-jobs", bin, 0o755},
		{"/etc/systemd/system/" + unitName, service, 0o644},
		{"/etc/systemd/system/" + socketName, readUnit(t, socketName), 0o644},
		{"/etc/systemd/system/" + unitName + ".d/credentials.conf", credentialsDropIn(t, service, creds), 0o644},
		// The unit's 30 s watchdog shortened, as a drop-in can: the stall
		// phase waits it out. Still above the lease's ttl (10 s), so the jobs
		// move by the lease's expiry before systemd restarts the process.
		{"/etc/systemd/system/" + unitName + ".d/watchdog.conf", []byte("[Service]\nWatchdogSec=12s\n"), 0o644},
		{"/etc/snip-jobs/snip-jobs.yaml", cfg, 0o644},
		{unitWatcher, exectest.Script(watcherLoop), 0o755},
		{"/etc/snip-jobs/env", []byte("# the secrets come through LoadCredential=\n"), 0o600},
	}
	for name, value := range creds {
		files = append(files, struct {
			path string
			data []byte
			mode os.FileMode
		}{"/etc/snip-jobs/" + name, []byte(value + "\n"), 0o600})
	}
	for _, f := range files {
		if err := u.ct.WriteFile(ctx, f.path, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	u.run("systemctl", "daemon-reload")
	return u
}

func readUnit(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(unitDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// credentialsDropIn is a drop-in with the unit's own commented-out
// LoadCredential= lines for creds: the operator's `systemctl edit`, the unit
// itself untouched.
func credentialsDropIn(t *testing.T, service []byte, creds map[string]string) []byte {
	t.Helper()
	var b strings.Builder
	b.WriteString("[Service]\n")
	for name := range creds {
		m := regexp.MustCompile(`(?m)^# (LoadCredential=` + regexp.QuoteMeta(name) + `:/etc/snip-jobs/` + regexp.QuoteMeta(name) + `)$`).FindSubmatch(service)
		if m == nil {
			t.Fatalf("%s no longer shows a LoadCredential= line for %s", unitName, name)
		}
		fmt.Fprintf(&b, "%s\n", m[1])
	}
	return []byte(b.String())
}

func (u *unit) run(args ...string) string {
	u.t.Helper()
	out, err := u.ct.Run(context.Background(), args[0], args[1:]...)
	if err != nil {
		u.t.Fatal(err)
	}
	return out
}

// show is systemctl show: the unit's properties.
func (u *unit) show(name string) map[string]string {
	u.t.Helper()
	props := map[string]string{}
	for line := range strings.Lines(u.run("systemctl", "show", name)) {
		k, v, _ := strings.Cut(strings.TrimRight(line, "\n"), "=")
		props[k] = v
	}
	return props
}

// mainPID is the service's main process, as the container and as the host
// see it.
func (u *unit) mainPID() (inner, host int) {
	u.t.Helper()
	inner, _ = strconv.Atoi(u.show(unitName)["MainPID"])
	if inner == 0 {
		u.t.Fatalf("%s has no main process", unitName)
	}
	host, err := u.ct.HostPID(inner)
	if err != nil {
		u.t.Fatal(err)
	}
	return inner, host
}

// checkCredentials: each credential is in the credentials directory with the
// content of its source, owned by the service's dynamic user and readable by
// it, by no other user, and the sources are not readable by that user.
func (u *unit) checkCredentials(mainPID string, creds map[string]string) {
	u.t.Helper()
	pid, _ := strconv.Atoi(mainPID)
	hostPID, err := u.ct.HostPID(pid)
	if err != nil {
		u.t.Fatal(err)
	}
	uid := processUID(u.t, hostPID)
	if uid == "0" || uid == "" {
		u.t.Fatalf("the service runs as uid %q, not a dynamic user", uid)
	}
	ctx := context.Background()
	as := func(who, path string) (string, error) {
		return u.ct.Run(ctx, "setpriv", "--reuid="+who, "--regid="+who, "--clear-groups", "cat", path)
	}
	modes := map[string]string{credentialsDir: "500"}
	for name := range creds {
		modes[credentialsDir+"/"+name] = "400"
	}
	for path, mode := range modes {
		if st := strings.TrimSpace(u.run("stat", "--format=%u %a", path)); st != uid+" "+mode {
			u.t.Errorf("%s: owner and mode %q; want the service's uid %s and mode 0%s", path, st, uid, mode)
		}
	}
	for name, want := range creds {
		path := credentialsDir + "/" + name
		if got, err := as(uid, path); err != nil || strings.TrimSpace(got) != want {
			u.t.Errorf("the service's user reads %s: %q, %v; want the source's content", path, got, err)
		}
		if got, err := as("65534", path); err == nil || !strings.Contains(got, "Permission denied") {
			u.t.Errorf("another user (nobody) reads %s: %q, %v; want Permission denied", path, got, err)
		}
		if got, err := as(uid, "/etc/snip-jobs/"+name); err == nil || !strings.Contains(got, "Permission denied") {
			u.t.Errorf("the service's user reads the source /etc/snip-jobs/%s: %q, %v; want Permission denied", name, got, err)
		}
	}
	// The config names the credentials: a database URL from anywhere else
	// would not exist here, and the renewer loaded the keys.
	u.journal.wait("the renewer's keys loaded from its key_file", 0, processSays("certrenew configured", `"sealing_key":`))
	u.journal.wait("the schema compared over the URL read from the credential", 0, processSays("the database schema has every migration"))
}

func processUID(t *testing.T, hostPID int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", hostPID))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}

// crash kills the leading main process with SIGKILL and checks that
// ExecStopPost='s reclaim revoked its lease, the host took the jobs before
// the lease would have expired, and the restarted process comes up; a
// challenge request sent right after the kill is answered.
func (u *unit) crash(observer *clientv3.Client, first etcdlease.Leader, token string) {
	t := u.t
	t.Helper()
	ttl, err := observer.TimeToLive(context.Background(), first.Lease)
	if err != nil {
		t.Fatal(err)
	}
	terms := watchTerms(t, observer, first.Job)
	mark := u.journal.len()
	_, pid := u.mainPID()
	killed := time.Now()
	expiresBy := killed.Add(time.Duration(ttl.TTL) * time.Second) // had nobody revoked it
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	answered := make(chan string, 1)
	go func() {
		code, body := getChallenge(token, challengeDomain)
		answered <- fmt.Sprintf("%d %s", code, body)
	}()
	next := terms.next(t, first.Token)
	if next.leader.Instance != hostInstance || !next.revokedFirst {
		t.Fatalf("after the kill: %+v; want the old key gone, then %s's term", next, hostInstance)
	}
	if !next.seen.Before(expiresBy) {
		t.Errorf("the job moved %v after the kill, when the lease would have expired (ttl %ds)", next.seen.Sub(killed), ttl.TTL)
	}
	t.Logf("SIGKILL of the main process → %s's term of %s (etcd watch): %v", hostInstance, first.Job, next.seen.Sub(killed).Round(time.Millisecond))
	u.journal.wait("systemd: the main process was killed", mark, systemdSays("Main process exited, code=killed, status=9/KILL"))
	u.journal.wait("ExecStopPost='s reclaim revoking the lease", mark, processSays("reclaim: the process is gone; revoked its lease", `"SERVICE_RESULT":"signal"`))
	u.journal.wait("the restarted process ready", mark, unitStarted)
	if got := <-answered; got != "200 "+token+".thumbprint" {
		t.Errorf("a challenge request sent right after the kill got %q; want it answered after the restart", got)
	}
	if ttl, err := observer.TimeToLive(context.Background(), first.Lease); err != nil || ttl.TTL != -1 {
		t.Errorf("the killed process's lease: %v, %v; want it revoked", ttl, err)
	}
}

// program waits for the exec job's program to start after the journal's
// entry from, and to say that the credentials were refused to it. It returns
// a pidfd of the program (the host's: pidfds are not the container's).
func (u *unit) program(from int) int {
	t := u.t
	t.Helper()
	started, at := u.journal.wait("the exec job's program started", from, processSays("program started", `"job":"program"`))
	var line struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(started.Message), &line); err != nil || line.PID == 0 {
		t.Fatalf("the program's start line %q: %v", started.Message, err)
	}
	said, _ := u.journal.wait("the program's word on the credentials", at, processSays("program output", `"job":"program"`, `"pid":`+strconv.Itoa(line.PID)+`,`))
	if !strings.Contains(said.Message, `"line":"credentials refused"`) {
		t.Errorf("an exec job's program under the unit: %s; want the credentials refused to it", said.Message)
	}
	host, err := u.ct.HostPID(line.PID)
	if err != nil {
		t.Fatal(err)
	}
	return openPidfd(t, host)
}

// supervisors: the unit runs at most max exec supervisors of job (a run's,
// and a spare).
func (u *unit) supervisors(job string, max int) {
	u.t.Helper()
	ps := u.run("sh", "-c", `for p in /proc/[0-9]*; do echo "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)"; done`)
	var sups []string
	for line := range strings.Lines(ps) {
		if strings.Contains(line, supervisor.Arg) && strings.Contains(line, " job "+job+" ") {
			sups = append(sups, strings.TrimSpace(line))
		}
	}
	if len(sups) > max {
		u.t.Errorf("%d exec supervisors of %s in the unit, want at most %d:\n%s", len(sups), job, max, strings.Join(sups, "\n"))
	}
}

// programGone: after what, the program behind pidfd has exited.
func (u *unit) programGone(pidfd int, what string) {
	u.t.Helper()
	if !pidfdExited(pidfd) {
		u.t.Errorf("after %s, the exec job's program is still running", what)
	}
}

// leftNothing: systemd killed no process of the unit in the journal's
// entries from mark on: the service ended its programs and their
// supervisors itself before it exited.
func (u *unit) leftNothing(mark int, what string) {
	u.t.Helper()
	for _, e := range u.journal.j.Entries()[mark:] {
		if e.PID == 1 && strings.Contains(e.Message, "Killing process") {
			u.t.Errorf("after %s, systemd had to kill a process of the unit: %s", what, e.Message)
		}
	}
}

// stall stops the leading main process (SIGSTOP) and checks that the host
// takes its jobs and that systemd's watchdog restarts it.
func (u *unit) stall(observer *clientv3.Client, first etcdlease.Leader) {
	t := u.t
	t.Helper()
	inner, pid := u.mainPID()
	restarts := u.show(unitName)["NRestarts"]
	mark := u.journal.len()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if l := leaderOf(t, observer, first.Job, first.Token); l.Instance != hostInstance {
		t.Fatalf("%s moved to %s while %s was stopped", first.Job, l.Instance, unitInstance)
	}
	moved := time.Since(stopped)
	timeout, _ := u.journal.wait("systemd's watchdog timeout", mark, systemdSays("Watchdog timeout"))
	u.journal.wait("the unit failing with result 'watchdog'", mark, systemdSays("Failed with result 'watchdog'"))
	_, end := u.journal.wait("the restarted process ready", mark, unitStarted)
	for _, e := range u.journal.j.Entries()[mark : end+1] {
		if e.PID == 1 {
			t.Logf("systemd: %s", e.Message)
		}
	}
	t.Logf("SIGSTOP → jobs on %s after %v (lease expiry), watchdog timeout after %v",
		hostInstance, moved.Round(time.Millisecond), timeout.Time.Sub(stopped).Round(time.Millisecond))
	if again, _ := u.mainPID(); again == inner || u.show(unitName)["NRestarts"] == restarts {
		t.Fatalf("the stopped process was not restarted (main pid %d → %d)", inner, again)
	}
}

// stop stops the unit while it leads first, and checks the clean hand-over.
func (u *unit) stop(observer *clientv3.Client, url string, first etcdlease.Leader, token string) {
	t := u.t
	t.Helper()
	tokens := map[string]int64{first.Job: first.Token}
	mark := u.journal.len()
	u.run("systemctl", "stop", unitName)
	show := u.show(unitName)
	if show["ActiveState"] != "inactive" || show["Result"] != "success" || show["ExecMainCode"] != "1" || show["ExecMainStatus"] != "0" {
		t.Errorf("after systemctl stop: %s, result %s, main process code %s status %s; want inactive, success, exited 0",
			show["ActiveState"], show["Result"], show["ExecMainCode"], show["ExecMainStatus"])
	}
	stopping, _ := u.journal.wait("systemd stopping the unit", mark, systemdSays("Stopping "))
	clean, _ := u.journal.wait("the process's last line", mark, processSays("stopped cleanly"))
	u.journal.wait("ExecStopPost='s reclaim finding nothing left", mark, processSays("reclaim: nothing to do"))
	t.Logf("systemctl stop → \"stopped cleanly\": %v (TimeoutStopSec=%s)", clean.Time.Sub(stopping.Time).Round(time.Millisecond), show["TimeoutStopUSec"])
	for job, token := range tokens {
		if l := leaderOf(t, observer, job, token); l.Instance != hostInstance {
			t.Errorf("%s after the stop: led by %s", job, l.Instance)
		}
		if reason := benchtest.Value[string](t, dbConn(t, url), `SELECT coalesce(reason, '') FROM job_terms WHERE job = $1 AND token = $2`, job, token); reason != "shutdown" {
			t.Errorf("%s's term %d ended with %q, want shutdown (resigned at SIGTERM)", job, token, reason)
		}
	}
	// Port 80 stays the socket unit's: a request starts the service again.
	if state := u.show(socketName)["ActiveState"]; state != "active" {
		t.Fatalf("%s is %s after the service stopped; want it listening still", socketName, state)
	}
	mark = u.journal.len()
	if code, body := getChallenge(token, challengeDomain); code != http.StatusOK || body != token+".thumbprint" {
		t.Errorf("HTTP-01 on port 80 after the service stopped: %d %q; want the request to start it and be answered", code, body)
	}
	u.journal.wait("the service started by a request on port 80", mark, systemdSays("Starting "+unitName))
	u.run("systemctl", "stop", socketName, unitName)
	for _, name := range []string{socketName, unitName} {
		if show := u.show(name); show["ActiveState"] != "inactive" || show["Result"] != "success" {
			t.Errorf("after stopping both: %s is %s (result %s)", name, show["ActiveState"], show["Result"])
		}
	}
}

// settled waits until every job of singletons has a leader and the
// scheduler's spread is done (each instance leads one or more, neither two
// more than the other) and returns a term of the unit's: its first job.
func settled(t *testing.T, observer *clientv3.Client, singletons []string) etcdlease.Leader {
	t.Helper()
	var mine etcdlease.Leader
	eventually(t, fmt.Sprintf("the %d singletons led, spread over both instances", len(singletons)), func() bool {
		ls, err := etcdlease.NewCluster(observer, testPrefix).Leaders(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]int{}
		led := map[string]etcdlease.Leader{}
		for _, l := range ls {
			by[l.Instance]++
			led[l.Job] = l
		}
		mine = etcdlease.Leader{}
		for _, job := range singletons {
			l, ok := led[job]
			if !ok {
				return false
			}
			if l.Instance == unitInstance && mine.Job == "" {
				mine = l
			}
		}
		unit, host := by[unitInstance], by[hostInstance]
		return len(ls) == len(singletons) && unit+host == len(singletons) && unit > 0 && host > 0 && max(unit-host, host-unit) < 2
	})
	return mine
}

// ledJobs lists the jobs of the config at path led through terms (the
// singletons that are not database-mode cron jobs), in its order.
func ledJobs(t *testing.T, path string) []string {
	t.Helper()
	f, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range f.Jobs {
		if j.Mode() == configs.ModeLeader {
			out = append(out, j.Name)
		}
	}
	return out
}

// checkFence: the fence refused a write only once a newer term had begun,
// and no run of a term was refused while it was the newest.
func checkFence(t *testing.T, url string) {
	t.Helper()
	pool := dbConn(t, url)
	if n := benchtest.Value[int64](t, pool, `SELECT count(*) FROM fence_rejections r
		WHERE r.token >= r.current OR NOT EXISTS (SELECT 1 FROM job_terms n WHERE n.token = r.current AND n.started_at <= r.at)`); n != 0 {
		t.Errorf("%d write(s) refused without a newer term having begun", n)
	}
	if n := benchtest.Value[int64](t, pool, `SELECT count(*) FROM job_runs r WHERE r.result = 'stale'
		AND NOT EXISTS (SELECT 1 FROM job_terms n WHERE n.job = r.job AND n.token > r.token AND n.started_at <= r.finished_at)`); n != 0 {
		t.Errorf("%d run(s) refused while their term was the newest", n)
	}
	refused := benchtest.Value[int64](t, pool, `SELECT count(*) FROM fence_rejections`)
	t.Logf("writes refused by the fence (all of replaced terms): %d", refused)
}

// journal waits on the unit's journal.
type journal struct {
	t *testing.T
	j *systemdtest.Journal
}

func (j journal) len() int { return j.j.Len() }

func (j journal) wait(what string, from int, match func(systemdtest.Entry) bool) (systemdtest.Entry, int) {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchtest.Patience)
	defer cancel()
	e, i, err := j.j.Wait(ctx, from, match)
	if err != nil {
		j.t.Fatalf("waiting for %s in the journal: %v", what, err)
	}
	return e, i
}

// systemdSays matches systemd's own lines about the unit.
func systemdSays(sub string) func(systemdtest.Entry) bool {
	return func(e systemdtest.Entry) bool { return e.PID == 1 && strings.Contains(e.Message, sub) }
}

// processSays matches a JSON log line of snip-jobs with msg (a prefix) and
// every one of subs.
func processSays(msg string, subs ...string) func(systemdtest.Entry) bool {
	return func(e systemdtest.Entry) bool {
		if e.PID == 1 || !strings.Contains(e.Message, `"msg":"`+msg) {
			return false
		}
		for _, s := range subs {
			if !strings.Contains(e.Message, s) {
				return false
			}
		}
		return true
	}
}

func unitStarted(e systemdtest.Entry) bool { return e.PID == 1 && e.MessageID == msgUnitStarted }

// termSeen is the first new term of a job after some token, as a watch saw it.
type termSeen struct {
	leader       etcdlease.Leader
	seen         time.Time
	revokedFirst bool // the old leader key was deleted before the new term
}

type termWatch struct {
	cli     *clientv3.Client
	job     string
	events  clientv3.WatchChan
	pending []*clientv3.Event // received, not yet looked at
}

// watchTerms watches job's leader key from now on.
func watchTerms(t *testing.T, cli *clientv3.Client, job string) *termWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &termWatch{cli: cli, job: job, events: cli.Watch(ctx, layout.LeaderKey(testPrefix, job))}
}

// event is the next change of the key, waited for until timeout.
func (w *termWatch) event(t *testing.T, what string, timeout <-chan time.Time) *clientv3.Event {
	t.Helper()
	for len(w.pending) == 0 {
		select {
		case resp := <-w.events:
			w.pending = resp.Events
		case <-timeout:
			t.Fatalf("no %s of %s within %v", what, w.job, benchtest.Patience)
		}
	}
	ev := w.pending[0]
	w.pending = w.pending[1:]
	return ev
}

// deleted waits for the key's deletion: the term's end (a resign, a
// revoke, its lease's expiry).
func (w *termWatch) deleted(t *testing.T) {
	t.Helper()
	timeout := time.After(benchtest.Patience)
	for w.event(t, "end of the term", timeout).Type != clientv3.EventTypeDelete {
	}
}

// next waits for a term other than token.
func (w *termWatch) next(t *testing.T, token int64) termSeen {
	t.Helper()
	var s termSeen
	timeout := time.After(benchtest.Patience)
	for {
		if w.event(t, "new term", timeout).Type == clientv3.EventTypeDelete {
			s.revokedFirst = true
			continue
		}
		l, ok, err := etcdlease.NewCluster(w.cli, testPrefix).LeaderKey(context.Background(), w.job)
		if err != nil {
			t.Fatal(err)
		}
		if ok && l.Token != token {
			s.leader, s.seen = l, time.Now()
			return s
		}
	}
}

// instanceLease is the lease of instance's registration (0: none).
func instanceLease(t *testing.T, cli *clientv3.Client, instance string) clientv3.LeaseID {
	t.Helper()
	regs, err := etcdlease.NewCluster(cli, testPrefix).Instances(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regs {
		if r.Instance == instance {
			id, err := strconv.ParseInt(r.Lease, 16, 64)
			if err != nil {
				t.Fatalf("%s's lease %q: %v", instance, r.Lease, err)
			}
			return clientv3.LeaseID(id)
		}
	}
	return 0
}

// storeChallenge stores an HTTP-01 token for challengeDomain, as the renewer
// does, and returns it.
func storeChallenge(t *testing.T, url string) string {
	t.Helper()
	token := strings.TrimRight(base64.URLEncoding.EncodeToString([]byte(randomKey(t)))[:43], "=")
	dbtest.Exec(t, url, fmt.Sprintf(`INSERT INTO certrenew_challenges (token, domain, key_auth, fence_token, expires_at)
		VALUES ('%s', '%s', '%s.thumbprint', 1, now() + interval '1 hour')`, token, challengeDomain, token))
	return token
}

// getChallenge asks port 80 for token as the CA does, with Host.
func getChallenge(token, host string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:80/.well-known/acme-challenge/"+token, nil)
	if err != nil {
		return 0, err.Error()
	}
	req.Host = host
	resp, err := (&http.Client{Timeout: benchtest.Patience}).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// holdPort80 makes this test the only one on the machine using port 80 (the
// unit's socket binds it in the host's network namespace, which the container
// shares) and fails if something else holds it.
func holdPort80(t *testing.T, cache string) {
	t.Helper()
	unlock, err := flock.Lock(context.Background(), filepath.Join(cache, "port-80.lock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
	ln, err := net.Listen("tcp", ":80")
	if err != nil {
		t.Fatalf("port 80 is taken on this machine (%v): snip-jobs-challenge.socket binds it in the host's network "+
			"namespace, which the test's container shares; stop what listens there", err)
	}
	ln.Close()
}

func cacheDir(t *testing.T) string {
	t.Helper()
	base, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("no cache folder for the container's root file system: %v", err)
	}
	return filepath.Join(base, "snip-jobs")
}

// randomKey is a certrenew key line: 32 random bytes, base64.
func randomKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// dbConn is a connection for the test's checks, closed at the end.
func dbConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("… %d earlier lines", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
