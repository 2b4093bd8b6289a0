package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/snip/snip-jobs/deploy/release/debpkg"
	"github.com/snip/snip-jobs/deploy/release/relbuild"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
	"github.com/snip/snip-jobs/testbench/freeport"
	"github.com/snip/snip-jobs/testbench/releases"
	"github.com/snip/snip-jobs/testbench/systemdtest"
)

const (
	pkgInstance = "pkg-1"
	configPath  = "/etc/snip-jobs/snip-jobs.yaml"
)

// The Debian package made by the release build, installed with apt-get
// (dpkg's own checks) in a Debian container whose PID 1 is a real systemd,
// one boot for the whole life of a server's package:
//
//   - installed with no config: the units are enabled, the service does not
//     start (nor its socket) and the journal says why, naming the file;
//   - a config written: systemctl start, and `snip-jobs status` shows the
//     instance leading the job; systemctl stop runs ExecStopPost='s reclaim;
//   - purged: everything the package and its service made is gone;
//   - the previous release's package installed over a config that was
//     already there starts at once; upgraded to this one, the config is
//     kept byte for byte and the new binary runs and leads;
//   - an upgrade whose kept config the new binary refuses leaves the old
//     process running (its binary, its term), says why and how to fix it;
//     fixed and restarted, the new binary runs;
//   - purged again: nothing left.
func TestTheDebianPackageUnderARealSystemd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rctx, cancel := context.WithTimeout(ctx, rootfsPatience)
	root, err := systemdtest.Rootfs(rctx, cacheDir(t))
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	cur, prev := debPackages(t)
	etcd := etcdtest.Start(t, 1)
	observer := etcdClient(t, etcd.Endpoint(0))
	url := benchtest.PostgresDB(t)
	hostCfg := writeConfig(t, config{instance: pkgInstance, endpoints: []string{etcd.Endpoint(0)},
		ttl: "ttl: 10s\n  margin: 3s", jobs: pulseJob})
	env := []byte("SNIP_JOBS_DATABASE_URL=" + migrate(t, hostCfg, url) + "\n")
	cfg := read(t, hostCfg)

	p := &pkgHost{unit: boot(t, root, "snip-jobs-pkg"), cur: cur, prev: prev}
	// Port 80 is the unit test's (and the host's): this socket listens
	// elsewhere, as a drop-in can make it.
	p.write("/etc/systemd/system/"+socketName+".d/port.conf",
		fmt.Sprintf("[Socket]\nListenStream=\nListenStream=127.0.0.1:%d\n", port(t)), 0o644)
	before := p.files()

	// Installed, not configured.
	out := p.apt("install", cur)
	if !strings.Contains(out, "snip-jobs: not started: write "+configPath) {
		t.Errorf("apt-get install without a config does not say what to do:\n%s", out)
	}
	p.checkEnabled()
	mark := p.journal.len()
	p.run("systemctl", "start", unitName)
	if s := p.show(unitName); s["ActiveState"] != "inactive" || s["ConditionResult"] != "no" {
		t.Fatalf("systemctl start without a config: %s (condition result %s); want it skipped", s["ActiveState"], s["ConditionResult"])
	}
	skipped, _ := p.journal.wait("systemd saying why the unit did not start", mark, func(e systemdtest.Entry) bool {
		return e.Unit == unitName && systemdSays("was skipped because of an unmet condition check (ConditionPathExists="+configPath+")")(e)
	})
	t.Logf("the journal, on systemctl start without a config: %s", skipped.Message)
	if s := p.show(socketName); s["ActiveState"] != "inactive" {
		t.Errorf("%s is %s without a config; want it not listening", socketName, s["ActiveState"])
	}

	// Configured: it runs, leads, and stops through the reclaim.
	p.configure(cfg, env)
	p.start(func() { p.systemctl("start") })
	p.running(cur)
	p.leads(observer, 0)
	mark = p.journal.len()
	p.run("systemctl", "stop", unitName)
	p.journal.wait("the process's last line", mark, processSays("stopped cleanly"))
	p.journal.wait("ExecStopPost='s reclaim, from the package's binary", mark, processSays("reclaim: nothing to do"))

	p.apt("purge", "snip-jobs")
	p.gone(before)

	// The previous release, configured before it is installed: it starts.
	p.configure(cfg, env)
	p.start(func() { p.apt("install", prev) })
	old := p.running(prev)
	first := p.leads(observer, 0)

	// Upgraded: the config kept, the new binary running and leading.
	p.start(func() { p.apt("install", cur) })
	if got := p.run("cat", configPath); got != string(cfg) {
		t.Errorf("the upgrade changed %s:\n%s", configPath, got)
	}
	if p.running(cur) == old {
		t.Error("the upgrade did not restart the service")
	}
	p.leads(observer, first.Token)

	// Back to the previous release, then an upgrade the config fails.
	p.start(func() { p.apt("install", prev, "--allow-downgrades") })
	old = p.running(prev)
	held := p.leads(observer, 0)
	p.write(configPath, string(cfg)+"colour: blue\n", 0o644)
	mark = p.journal.len()
	out = p.apt("install", cur)
	for _, want := range []string{configPath + ":", `unknown key "colour"`, "was not (re)started", "systemctl restart snip-jobs"} {
		if !strings.Contains(out, want) {
			t.Errorf("an upgrade over a config the new binary refuses does not say %q:\n%s", want, out)
		}
	}
	if pid := p.running(prev); pid != old {
		t.Errorf("the upgrade restarted the service (main pid %d → %d) with a config the new binary refuses", old, pid)
	}
	for _, e := range p.journal.j.Entries()[mark:] {
		if e.PID == 1 && e.Unit == unitName {
			t.Errorf("systemd, during the upgrade the config fails: %s", e.Message)
		}
	}
	if l := leaderNow(t, observer, "pulse"); l.Instance != pkgInstance || l.Token != held.Token {
		t.Errorf("after the refused restart, pulse is led by %s (token %d); want the old process's term, %d", l.Instance, l.Token, held.Token)
	}
	p.write(configPath, string(cfg), 0o644)
	p.start(func() { p.systemctl("restart") })
	p.running(cur)
	p.leads(observer, held.Token)

	p.apt("purge", "snip-jobs")
	p.gone(before)
	checkPulses(t, pulses(t, url))
}

// port is a free port below the ephemeral range.
func port(t *testing.T) int {
	t.Helper()
	p, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// deb is a package file and the binary it holds.
type deb struct {
	path, version, sha string // the file, its Debian version, its binary's SHA-256
}

// debPackages makes the packages the test installs with the release's code:
// this tree's (the release build of the work tree, changes not committed
// included) and the previous release's (its binary, from
// testbench/releases, at its commit's version, which sorts lower).
func debPackages(t *testing.T) (cur, prev deb) {
	t.Helper()
	ctx := context.Background()
	root, err := relbuild.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	maintainer, err := relbuild.Author(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	pack := func(bin string, s relbuild.Stamp) deb {
		dir := filepath.Join(out, s.Commit)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path, err := debpkg.Package(ctx, debpkg.Spec{Source: root, Binary: bin, Version: s.Version,
			Commit: s.Commit, Date: s.Date, Maintainer: maintainer, OutDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return deb{path: path, version: debpkg.DebianVersion(s.Version), sha: fileSHA(t, bin)}
	}
	bin := filepath.Join(out, "snip-jobs")
	s, err := relbuild.Build(ctx, relbuild.Options{Dir: root, Out: bin, AllowModified: true})
	if err != nil {
		t.Fatal(err)
	}
	cur = pack(bin, s)
	commit, err := releases.Previous(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bin, err = releases.SnipJobs(ctx, commit); err != nil {
		t.Fatal(err)
	}
	if s, err = relbuild.CommitStamp(ctx, root, commit); err != nil {
		t.Fatal(err)
	}
	prev = pack(bin, s)
	t.Logf("packages: %s (this tree), %s (the previous release)", filepath.Base(cur.path), filepath.Base(prev.path))
	return cur, prev
}

// pkgHost is the container the package is installed in.
type pkgHost struct {
	*unit
	cur, prev deb
}

func (p *pkgHost) write(path, data string, mode os.FileMode) {
	p.t.Helper()
	if err := p.ct.WriteFile(context.Background(), path, []byte(data), mode); err != nil {
		p.t.Fatal(err)
	}
}

// apt runs apt-get install (of a package file, copied in) or purge, and
// returns its output; dpkg's records must then say the package is
// installed at the file's version, or gone.
func (p *pkgHost) apt(verb string, what any, flags ...string) string {
	p.t.Helper()
	ctx := context.Background()
	began := time.Now()
	args := append([]string{"apt-get", verb, "--yes", "--no-install-recommends"}, flags...)
	var want string
	switch w := what.(type) {
	case deb:
		in := "/tmp/packages/" + filepath.Base(w.path)
		if err := p.ct.WriteFile(ctx, in, read(p.t, w.path), 0o644); err != nil {
			p.t.Fatal(err)
		}
		args, want = append(args, in), "install ok installed "+w.version
	case string:
		args = append(args, w)
	}
	out, err := p.ct.Run(ctx, "env", append([]string{"DEBIAN_FRONTEND=noninteractive"}, args...)...)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("%s: %v", strings.Join(args, " "), time.Since(began).Round(time.Millisecond))
	status, _ := p.ct.Run(ctx, "dpkg-query", "--show", "--showformat=${Status} ${Version}", debpkg.Name)
	if want == "" && !strings.Contains(status, "no packages found") || want != "" && status != want {
		p.t.Fatalf("after apt-get %s: dpkg says %q, want %q\n%s", verb, status, want, out)
	}
	return out
}

// systemctl runs systemctl verb on the service; a failure is logged, not
// fatal: start says whether it ended up running.
func (p *pkgHost) systemctl(verb string) {
	if out, err := p.ct.Run(context.Background(), "systemctl", verb, unitName); err != nil {
		p.t.Logf("systemctl %s %s: %v\n%s", verb, unitName, err, out)
	}
}

// start does what starts the service and waits until systemd says it
// started (READY=1). A start that systemd failed and Restart= retried is
// logged: systemd 252 failed one (status=219/CGROUP, as the old process's
// cgroup emptied) in one of ten runs on a loaded machine, and started it
// again after RestartSec.
func (p *pkgHost) start(do func()) {
	p.t.Helper()
	mark := p.journal.len()
	do()
	_, end := p.journal.wait("the service started", mark, func(e systemdtest.Entry) bool { return unitStarted(e) && e.Unit == unitName })
	for _, e := range p.journal.j.Entries()[mark:end] {
		if e.PID == 1 && e.Unit == unitName && strings.Contains(e.Message, "Failed") {
			p.t.Logf("systemd failed a start, then restarted the service: %s", e.Message)
		}
	}
}

// configure writes the config and the environment file (the database URL).
func (p *pkgHost) configure(cfg, env []byte) {
	p.write(configPath, string(cfg), 0o644)
	p.write("/etc/snip-jobs/env", string(env), 0o600)
}

// checkEnabled: the install enabled the service and its socket.
func (p *pkgHost) checkEnabled() {
	p.t.Helper()
	for _, name := range []string{unitName, socketName} {
		if out, err := p.ct.Run(context.Background(), "systemctl", "is-enabled", name); err != nil || strings.TrimSpace(out) != "enabled" {
			p.t.Errorf("after the install, %s is %q (%v); want enabled", name, strings.TrimSpace(out), err)
		}
	}
}

// running: the service is active, its main process runs want's binary
// (/proc/PID/exe, the file it was started from even once replaced on
// disk), and `snip-jobs version` of the installed file names want's
// version when it is this tree's. It returns the main PID.
func (p *pkgHost) running(want deb) int {
	p.t.Helper()
	s := p.show(unitName)
	if s["ActiveState"] != "active" || s["SubState"] != "running" {
		p.t.Fatalf("%s is %s/%s; want it running", unitName, s["ActiveState"], s["SubState"])
	}
	inner, host := p.mainPID()
	if got := fileSHA(p.t, fmt.Sprintf("/proc/%d/exe", host)); got != want.sha {
		which := map[string]string{p.cur.sha: "this tree's", p.prev.sha: "the previous release's"}[got]
		p.t.Fatalf("the service's main process (pid %d) runs %q binary, not %s's", inner, which, want.version)
	}
	return inner
}

// leads: `snip-jobs status`, run in the container with the service's
// config and environment, shows this instance leading pulse with a term
// other than token not; the leader key in etcd says the same.
func (p *pkgHost) leads(observer *clientv3.Client, not int64) etcdlease.Leader {
	p.t.Helper()
	l := leaderOf(p.t, observer, "pulse", not)
	if l.Instance != pkgInstance {
		p.t.Fatalf("pulse is led by %s, want %s", l.Instance, pkgInstance)
	}
	out := p.run("sh", "-c", "set -a && . /etc/snip-jobs/env && exec snip-jobs status")
	row := regexp.MustCompile(fmt.Sprintf(`(?m)^pulse +\S+ +%s +%d `, regexp.QuoteMeta(pkgInstance), l.Token))
	if !row.MatchString(out) {
		p.t.Fatalf("snip-jobs status does not show %s leading pulse with token %d:\n%s", pkgInstance, l.Token, out)
	}
	return l
}

// files lists the container's files, but for the folders of the system's
// own bookkeeping: what a package may change and purge must restore.
func (p *pkgHost) files() string {
	p.t.Helper()
	return p.run("sh", "-c", `find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp `+
		`-o -path /var/log -o -path /var/cache -o -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/lib/systemd \) `+
		`-prune -o -print | sort`)
}

// gone: after a purge, the file system is as it was before the first
// install, dpkg keeps no file of the package, and no unit of it is loaded.
func (p *pkgHost) gone(before string) {
	p.t.Helper()
	if after := p.files(); after != before {
		p.t.Errorf("after apt-get purge, files differ from before the install:\n%s", lineDiff(before, after))
	}
	if out := p.run("sh", "-c", "ls /var/lib/dpkg/info | grep '^snip-jobs' || true"); out != "" {
		p.t.Errorf("dpkg still keeps files of the package:\n%s", out)
	}
	for _, name := range []string{unitName, socketName} {
		if s := p.show(name); s["LoadState"] != "not-found" || s["ActiveState"] != "inactive" {
			p.t.Errorf("after the purge %s is %s/%s; want not-found, inactive", name, s["LoadState"], s["ActiveState"])
		}
	}
}

// lineDiff lists the lines only in a (-) or only in b (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for line := range strings.Lines(s) {
			m[line] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out strings.Builder
	for line := range strings.Lines(a) {
		if !mb[line] {
			out.WriteString("- " + line)
		}
	}
	for line := range strings.Lines(b) {
		if !ma[line] {
			out.WriteString("+ " + line)
		}
	}
	return out.String()
}

// leaderNow is job's leader key as etcd has it now.
func leaderNow(t *testing.T, cli *clientv3.Client, job string) etcdlease.Leader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, _, err := etcdlease.NewCluster(cli, testPrefix).LeaderKey(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	h := sha256.Sum256(read(t, path))
	return hex.EncodeToString(h[:])
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
