package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/snip/snip-jobs/testbench/childproc"
	"github.com/snip/snip-jobs/testbench/clitest"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the status page's screenshot to docs/status-page.png")

// devProcess is a running snip-dev.
type devProcess struct {
	t       *testing.T
	proc    *childproc.Proc
	out     string // file holding its stdout
	errOut  string // and its stderr
	exited  <-chan struct{}
	control string    // the supervisor's URL, from what dev printed
	began   time.Time // when its banner was read
}

// interrupt sends dev SIGINT, as Ctrl-C does, and returns its exit code
// once it has exited.
func (d *devProcess) interrupt() int {
	d.t.Helper()
	if err := d.proc.Signal(syscall.SIGINT); err != nil {
		d.t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(waitLong):
		d.t.Fatal("snip-dev did not exit after SIGINT")
	}
	return d.proc.ExitCode()
}

// startDev runs snip-dev on free ports, with args, and waits for its
// banner. It is killed at the end of the test if it still runs.
func startDev(t *testing.T, args ...string) *devProcess {
	t.Helper()
	dir := t.TempDir()
	d := &devProcess{t: t, out: filepath.Join(dir, "stdout"), errOut: filepath.Join(dir, "stderr")}
	stdout, err := os.Create(d.out)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	stderr, err := os.Create(d.errOut)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	d.proc, err = childproc.Start(childproc.Spec{
		Path: snipDevBin, Args: append([]string{"--http-base", "-1", "--snip-jobs", snipJobsBin}, args...),
		Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	d.exited = d.proc.Done()
	t.Cleanup(func() {
		d.proc.Kill() // its children and PostgreSQL follow (parent-death signals)
		if t.Failed() {
			t.Logf("--- snip-dev's output ---\n%s\n--- its stderr ---\n%s", d.stdout(), d.stderr())
		}
	})
	control := regexp.MustCompile(`curl -X POST '(http://127\.0\.0\.1:\d+)/dev/kill\?job=`)
	eventually(t, "dev's banner", func() bool {
		select {
		case <-d.exited:
			t.Fatalf("snip-dev exited before it was ready: %v\n%s\n%s", d.proc.Err(), d.stdout(), d.stderr())
		default:
		}
		if m := control.FindStringSubmatch(d.stdout()); m != nil {
			d.control = m[1]
			return strings.Contains(d.stdout(), "What happens, as ")
		}
		return false
	})
	d.began = time.Now()
	return d
}

func (d *devProcess) stdout() string { b, _ := os.ReadFile(d.out); return string(b) }
func (d *devProcess) stderr() string { b, _ := os.ReadFile(d.errOut); return string(b) }

// devState is GET /dev/state.
type devState struct {
	Instances []struct {
		Name  string `json:"instance"`
		PID   int    `json:"pid"`
		State string `json:"state"`
		Page  string `json:"page"`
	} `json:"instances"`
}

func (d *devProcess) state() devState {
	d.t.Helper()
	resp, err := http.Get(d.control + "/dev/state")
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st devState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		d.t.Fatal(err)
	}
	return st
}

// chromium finds Debian's chromium, and fails the test loudly without it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: this test drives a real headless browser. Install Debian's chromium " +
		"(apt-get install -y chromium), as .ci/run does")
	return ""
}

// chromiumBrowser is a headless chromium with a fresh profile.
type chromiumBrowser struct {
	ctx     context.Context // its first tab
	profile string          // --user-data-dir
	tmp     string          // its TMPDIR
	close   func()          // closes it (idempotent) and removes tmp
}

// browser starts a headless chromium for the test. Its temporary files go to
// a folder of the test's (TMPDIR), and close shuts it down cleanly (a killed
// chromium leaves /tmp/org.chromium.Chromium.* behind); the test's cleanup
// closes it too, if the test did not.
func browser(t *testing.T) *chromiumBrowser {
	t.Helper()
	// Short: chromium puts its singleton socket there (at most 107 bytes).
	tmp, err := os.MkdirTemp("", "snip-jobs-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	b := &chromiumBrowser{profile: t.TempDir(), tmp: tmp}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // as root in CI
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), // the machine's network is closed
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(b.profile),
		chromedp.Env("TMPDIR="+tmp),
		chromedp.WindowSize(1280, 960),
	)
	ctx, cancel := chromedp.NewContext(actx)
	var once sync.Once
	b.ctx, b.close = ctx, func() {
		once.Do(func() {
			if err := chromedp.Cancel(ctx); err != nil { // Browser.close, and waits for the process
				t.Logf("close chromium: %v", err)
			}
			cancel()
			cancelAlloc()
			if err := os.RemoveAll(tmp); err != nil {
				t.Errorf("remove chromium's TMPDIR: %v", err)
			}
		})
	}
	t.Cleanup(b.close)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// chromiumLitter lists what chromium leaves in /tmp when it is not shut down
// cleanly: a folder (and shared-memory files) named after it.
func chromiumLitter(t *testing.T) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, e := range entries {
		if strings.Contains(e.Name(), "org.chromium.") || strings.HasPrefix(e.Name(), "snip-jobs-chromium-") {
			found[filepath.Join(os.TempDir(), e.Name())] = true
		}
	}
	return found
}

// checkNoLitter closes the browser and fails if it left anything in /tmp that
// was not there before: its TMPDIR, or a chromium folder holding its cookie
// (other tests' browsers may run meanwhile; their folders are theirs).
func (b *chromiumBrowser) checkNoLitter(t *testing.T, before map[string]bool) {
	t.Helper()
	cookie, err := os.Readlink(filepath.Join(b.profile, "SingletonCookie"))
	if err != nil {
		t.Fatalf("chromium's profile has no SingletonCookie (%v): cannot tell its folders from other browsers'", err)
	}
	b.close()
	for path := range chromiumLitter(t) {
		if before[path] {
			continue
		}
		if theirs, _ := os.Readlink(filepath.Join(path, "SingletonCookie")); path == b.tmp || theirs == cookie {
			t.Errorf("the browser left %s behind", path)
		}
	}
}

// pageView is what the test reads off the page in the browser.
type pageView struct {
	Conn      string `json:"conn"`  // "live" once the script has swapped in a fresh rendering
	Toast     string `json:"toast"` // the answer to the last button
	Instances []struct {
		Name    string `json:"name"`
		Up      bool   `json:"up"`
		Leads   int    `json:"leads"`
		Process string `json:"process"`
	} `json:"instances"`
	Jobs []struct {
		Name   string `json:"name"`
		Mode   string `json:"mode"`
		Leader string `json:"leader"`
		Token  string `json:"token"`
	} `json:"jobs"`
	Terms []struct {
		Job      string `json:"job"`
		Token    int64  `json:"token"`
		Instance string `json:"instance"`
		State    string `json:"state"`
		LateEnd  bool   `json:"late"`
		Title    string `json:"title"` // the tooltip
	} `json:"terms"`
	Window string `json:"window"` // the timeline's span
}

const readPage = `(() => ({
	conn: document.getElementById('conn').textContent,
	toast: document.getElementById('toast').hidden ? '' : document.getElementById('toast').textContent,
	instances: [...document.querySelectorAll('tr.instance')].map(r => ({
		name: r.dataset.instance, up: r.dataset.up === 'true', leads: +r.dataset.leads,
		process: (r.querySelector('.process') || {}).textContent || ''})),
	jobs: [...document.querySelectorAll('tr.job')].map(r => ({
		name: r.dataset.job, mode: r.dataset.mode, leader: r.dataset.leader, token: r.dataset.token})),
	terms: [...document.querySelectorAll('svg.timeline g.lane g.term')].map(g => ({
		job: g.closest('g.lane').dataset.job, token: +g.dataset.token, instance: g.dataset.instance, state: g.dataset.state,
		late: g.dataset.lateEnd === 'true', title: g.querySelector('title').textContent})),
	window: document.querySelector('[data-window]').dataset.window,
}))()`

// read reads the page as it is now in the browser (no reload: the page's
// script keeps it fresh).
func read(t *testing.T, ctx context.Context) pageView {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[pageView](readPage))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	return v
}

func (v pageView) instance(name string) (up bool, process string) {
	for _, in := range v.Instances {
		if in.Name == name {
			return in.Up, in.Process
		}
	}
	return false, ""
}

// watcher is a browser tab on one instance's status page.
type watcher struct {
	t     *testing.T
	ctx   context.Context
	pages map[string]string // instance → its page
	on    string            // the instance whose page is open
	query string
}

// open opens the page of an instance other than avoid (whose process is
// about to stop, or has) and waits until its script has refreshed it.
func (w *watcher) open(avoid string) {
	w.t.Helper()
	for _, name := range []string{"server-1", "server-2", "server-3"} {
		if name != avoid {
			w.on = name
			break
		}
	}
	if err := chromedp.Do(w.ctx, chromedp.Navigate(w.pages[w.on]+w.query)); err != nil {
		w.t.Fatal(err)
	}
	eventually(w.t, "the page of "+w.on, func() bool { v := read(w.t, w.ctx); return v.Conn == "live" && len(v.Jobs) > 0 })
}

// press clicks the button matched by sel and returns the groups of the
// supervisor's answer (shown on the page) matched by want.
func (w *watcher) press(sel, want string) []string {
	w.t.Helper()
	// Found and clicked in one step in the page: the page redraws itself
	// every second, and a node found first and clicked after (chromedp's
	// Click) may have been replaced in between ("Could not find node with
	// given id", seen in CI).
	q, err := json.Marshal(sel)
	if err != nil {
		w.t.Fatal(err)
	}
	click := fmt.Sprintf(`(() => { const b = document.querySelector(%s); if (!b) return false; b.click(); return true; })()`, q)
	eventually(w.t, "a button "+sel+" to press", func() bool {
		clicked, err := chromedp.Run(w.ctx, chromedp.Evaluate[bool](click))
		if err != nil {
			w.t.Fatalf("click %s: %v", sel, err)
		}
		return clicked
	})
	re := regexp.MustCompile(want)
	var m []string
	eventually(w.t, "the answer to "+sel, func() bool {
		m = re.FindStringSubmatch(read(w.t, w.ctx).Toast)
		return m != nil
	})
	return m
}

func (w *watcher) until(what string, cond func(v pageView) bool) pageView {
	w.t.Helper()
	var v pageView
	eventually(w.t, what, func() bool { v = read(w.t, w.ctx); return cond(v) })
	return v
}

func (v pageView) termTitled(job string, token int64) (state string, late bool, title string) {
	for _, tm := range v.Terms {
		if tm.Job == job && tm.Token == token {
			return tm.State, tm.LateEnd, tm.Title
		}
	}
	return "", false, ""
}

// successor tells whether a term of job after token was started by another
// instance than not, whatever its state now: the spread rule may already have
// moved the job on (even back to not).
func (v pageView) successor(job string, token int64, not string) bool {
	for _, tm := range v.Terms {
		if tm.Job == job && tm.Token > token && tm.Instance != not {
			return true
		}
	}
	return false
}

// spreadFairly tells whether three instances run, every singleton has a
// leader, and no instance leads two more than another (max − min ≤ 1, an
// instance leading none counted): the spread rule (rebalance) hands nothing
// over then, so it cannot race a button that acts on a job's leader.
func (v pageView) spreadFairly() bool {
	up, led := 0, map[string]int{}
	for _, in := range v.Instances {
		if in.Up && in.Process == "running" {
			up++
			led[in.Name] = 0
		}
	}
	singletons := 0
	for _, j := range v.Jobs {
		if j.Mode == "leader" {
			if j.Leader == "" {
				return false
			}
			singletons++
			led[j.Leader]++
		}
	}
	loads := slices.Collect(maps.Values(led))
	return up == 3 && len(led) == 3 && singletons >= 2 && slices.Max(loads)-slices.Min(loads) <= 1
}

func atoi64(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// One command brings up a three-instance cluster. Each instance's status
// page, in a real browser, shows the three instances and a leader for each
// singleton, over a window that fits the young cluster. With the page's
// buttons: the leader of a job resigns, and the timeline (refreshed by the
// page's script, without a reload) shows the hand-over, its term ended and a
// successor's with a higher token; the leader is killed, and its term, never
// closed, is cut at its successor's start; the killed instance's link answers
// at once with the supervisor's down page, whose button restarts it; a leader
// is paused (SIGSTOP), replaced, and resumed, and its term's end, recorded
// late, is drawn apart. Each term's tooltip and the narration say why it
// ended. Ctrl-C stops everything and removes every file, and the browser
// leaves nothing in /tmp.
func TestDevRunsAClusterWhoseStatusPageShowsAFailoverInABrowser(t *testing.T) {
	t.Parallel()
	litter := chromiumLitter(t)
	b := browser(t)
	ctx := b.ctx
	dev := startDev(t)
	if !strings.Contains(dev.stdout(), "What happens, as etcd reports it:") {
		t.Errorf("dev's banner does not name etcd:\n%s", dev.stdout())
	}
	st := dev.state()
	if len(st.Instances) != 3 {
		t.Fatalf("dev runs %d instances, want 3: %+v", len(st.Instances), st)
	}
	w := &watcher{t: t, ctx: ctx, pages: map[string]string{}}
	for _, in := range st.Instances {
		w.pages[in.Name] = in.Page
		if !strings.Contains(dev.stdout(), in.Page) {
			t.Errorf("dev did not print %s's page %s", in.Name, in.Page)
		}
	}

	w.open("")
	// Spread, too: an instance that leads two more than another hands a job
	// over on its own (rebalance), which must not race the resign below.
	const fair = "three instances up and a leader for each singleton, spread fairly"
	opened := w.until(fair, pageView.spreadFairly)
	if d, err := time.ParseDuration(opened.Window); err != nil || d >= 5*time.Minute {
		t.Errorf("the timeline of a cluster %v old spans %q; want it fitted to the history, under 5m", time.Since(dev.began), opened.Window)
	}

	// Resign: a clean hand-over.
	m := w.press(`button[data-action="resign"][data-job="heartbeat"]`,
		`heartbeat: (server-\d) \(token (\d+)\) resigned; (server-\d) took over \(token (\d+)\)`)
	resigned, resignToken := m[1], atoi64(t, m[2])
	why := map[string]string{} // narration and tooltips: why each term ended
	why[fmt.Sprintf("%s's term is over (token %d)", resigned, resignToken)] = "resigned at an operator's request (snip-jobs resign)"
	w.until(fmt.Sprintf("heartbeat's term %d ended and a successor's, its tooltip saying why", resignToken), func(v pageView) bool {
		state, _, title := v.termTitled("heartbeat", resignToken)
		return state == "ended" && v.successor("heartbeat", resignToken, resigned) &&
			strings.Contains(title, "ended: resigned at an operator's request (snip-jobs resign)")
	})

	// Kill the leader: it records nothing; its successor, or dev's reclaim,
	// closes its term, and the tooltip says what dev did. The resign may have left the
	// singletons unevenly spread: first let the spread rule settle them.
	w.until(fair, pageView.spreadFairly)
	m = w.press(`button[data-action="kill"][data-job="heartbeat"]`,
		`killed (server-\d) \(pid \d+, SIGKILL\), the leader of heartbeat \(token (\d+)\)`)
	victim, killToken := m[1], atoi64(t, m[2])
	why[fmt.Sprintf("%s's term is over (token %d)", victim, killToken)] = victim + " was killed by SIGKILL: no resign"
	if victim == w.on {
		w.open(victim)
	}
	v := w.until(fmt.Sprintf("heartbeat handed over from the killed %s (token %d), the tooltip saying so", victim, killToken), func(v pageView) bool {
		_, process := v.instance(victim)
		_, _, title := v.termTitled("heartbeat", killToken)
		return process == "exited" && v.successor("heartbeat", killToken, victim) && strings.Contains(title, "ended: "+victim+" was killed by SIGKILL")
	})
	if state, _, title := v.termTitled("heartbeat", killToken); state != "ended" || !strings.Contains(title, "(recorded by ") {
		t.Errorf("the killed leader's term is drawn %q, titled %q; want it ended, recorded by its successor or the reclaim", state, title)
	}
	w.until(victim+" shown down", func(v pageView) bool { up, _ := v.instance(victim); return !up })
	if !strings.Contains(dev.stdout(), victim+" exited (killed by SIGKILL)") {
		t.Errorf("dev did not say that %s was killed:\n%s", victim, dev.stdout())
	}

	// Its link answers at once: the supervisor's page saying it is down,
	// linking to the others; its button restarts it and brings the browser
	// back to its status page.
	w.visitDown(victim)
	w.until(victim+" up again, on its own page", func(v pageView) bool { up, process := v.instance(victim); return up && process == "running" })

	// Pause the leader of weekly-report (once the spread rule has given the
	// restarted instance its share); resume it once replaced.
	w.until(fair, pageView.spreadFairly)
	m = w.press(`button[data-action="pause"][data-job="weekly-report"]`,
		`paused (server-\d) \(pid \d+, SIGSTOP\), the leader of weekly-report \(token (\d+)\)`)
	sleeper, pauseToken := m[1], atoi64(t, m[2])
	why[fmt.Sprintf("%s's term is over (token %d)", sleeper, pauseToken)] = sleeper + " is paused (SIGSTOP): its lease expired"
	if sleeper == w.on { // its page froze with it
		w.open(sleeper)
	}
	w.until(fmt.Sprintf("a successor of the paused %s (token %d)", sleeper, pauseToken), func(v pageView) bool {
		_, process := v.instance(sleeper)
		return process == "paused" && v.successor("weekly-report", pauseToken, sleeper)
	})
	w.press(`button[data-action="resume"][data-instance="`+sleeper+`"]`, `resumed `+sleeper)
	w.until(fmt.Sprintf("the paused term (token %d) drawn with its late end, the tooltip saying why", pauseToken), func(v pageView) bool {
		state, late, title := v.termTitled("weekly-report", pauseToken)
		return state == "ended" && late && strings.Contains(title, "ended: "+sleeper+" is paused (SIGSTOP)")
	})

	// The narration said why each of those terms ended, and gave a reason
	// for every other (the instances spreading the singletons at start-up).
	out := dev.stdout()
	for over, reason := range why {
		if !strings.Contains(out, over+": "+reason+"; no leader until another instance wins") {
			t.Errorf("dev did not narrate %q with %q:\n%s", over, reason, out)
		}
	}
	for _, line := range clitest.LinesWith(out, "'s term is over (token") {
		if strings.Contains(line, "recorded no reason") {
			t.Errorf("dev narrated a term's end without its reason: %s", line)
		}
	}

	// The picture for the README: the last 30 seconds.
	w.query = "?window=30s"
	w.open("")
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.ArtifactDir(), "status-page.png")
	if *updateScreenshot {
		path = filepath.Join("..", "..", "docs", "status-page.png")
	}
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)

	// The printed certs command shows the demo's domains, certified by the
	// renewer against the in-process CA.
	certs := regexp.MustCompile(`the certificates +\S.* certs list --config (\S+)`).FindStringSubmatch(dev.stdout())
	if certs == nil {
		t.Fatalf("dev did not print the certs command:\n%s", dev.stdout())
	}
	eventually(t, "the demo's custom domains certified, as certs list shows them", func() bool {
		r := snip(t, "certs", "list", "--config", certs[1])
		return r.Code == 0 && strings.Count(r.Stdout, " valid ") == 3
	})

	// The banner's HTTPS line: the demo's web tier serves a domain with the
	// certificate the renewer stored; the banner's renew command changes it.
	https := regexp.MustCompile(`a domain over HTTPS +curl --cacert (\S+) --resolve (\S+):(\d+):127\.0\.0\.1 `).FindStringSubmatch(dev.stdout())
	renew := regexp.MustCompile(`renew its certificate +\S.* certs renew (\S+) --config (\S+)`).FindStringSubmatch(dev.stdout())
	if https == nil || renew == nil || renew[1] != https[2] {
		t.Fatalf("dev did not print the HTTPS and renew commands for one domain:\n%s", dev.stdout())
	}
	served := servedSerial(t, https[1], https[2], "127.0.0.1:"+https[3])
	var first string
	eventually(t, "the demo's web tier serving "+https[2], func() bool { first = served(); return first != "" })
	if r := snip(t, "certs", "renew", renew[1], "--config", renew[2]); r.Code != 0 {
		t.Fatalf("the banner's renew command: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	eventually(t, "a new certificate served for "+https[2]+" after certs renew", func() bool {
		s := served()
		return s != "" && s != first
	})

	// Ctrl-C: everything stops, every file goes.
	files := dirsNamedIn(dev.stdout(), `(/\S*/snip-jobs-dev-\d+)`, `data in (/\S*/snip-jobs-dev-pg-\d+)`)
	if len(files) != 2 {
		t.Fatalf("dev did not print its folders: %v", files)
	}
	st = dev.state()
	if code := dev.interrupt(); code != 0 {
		t.Errorf("dev exited %d after SIGINT, want 0", code)
	}
	if out := dev.stdout(); !strings.Contains(out, "stopped; removed "+files[0]+" and "+files[1]) || strings.Contains(out, "killing the instances now") {
		t.Errorf("dev's last words:\n%s", out[max(0, len(out)-600):])
	}
	for _, f := range files {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after dev stopped (%v)", f, err)
		}
	}
	for _, in := range st.Instances {
		if err := syscall.Kill(in.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still runs after dev stopped", in.Name, in.PID)
		}
	}
	b.checkNoLitter(t, litter)
}

// visitDown opens the page of the instance name, whose process is not
// running, expects the supervisor's down page, and presses its restart
// button: the form posts to the supervisor, which sends the browser back to
// the instance's status page once it has started the process again.
func (w *watcher) visitDown(name string) {
	w.t.Helper()
	if err := chromedp.Do(w.ctx, chromedp.Navigate(w.pages[name])); err != nil {
		w.t.Fatalf("open %s's page while it is down: %v", name, err)
	}
	type downPage struct {
		Down string   `json:"down"`
		Live []string `json:"live"`
	}
	page, err := chromedp.Run(w.ctx, chromedp.Evaluate[downPage](`(() => ({
		down: (document.getElementById('down') || {dataset: {}}).dataset.instance || '',
		live: [...document.querySelectorAll('ul.live a')].map(a => a.textContent)}))()`))
	if err != nil {
		w.t.Fatal(err)
	}
	if page.Down != name || len(page.Live) != 2 || slices.Contains(page.Live, name) {
		w.t.Fatalf("%s's page while it is down: %+v; want the down page of %s linking to the two others", name, page, name)
	}
	if _, err := chromedp.Run(w.ctx, chromedp.Evaluate[bool](`(() => { document.getElementById('restart').click(); return true; })()`)); err != nil {
		w.t.Fatal(err)
	}
	w.on = name
	var last string // what the browser shows, for the failure message
	defer func() {
		if w.t.Failed() {
			w.t.Logf("the browser, last: %s", last)
		}
	}()
	eventually(w.t, name+"'s own page, live, after the down page's restart", func() bool {
		v, err := chromedp.Run(w.ctx, chromedp.Evaluate[pageView](readPage))
		href, _ := chromedp.Run(w.ctx, chromedp.Evaluate[string](`location.href + ' ' + document.title + ' ' + document.body.innerText.slice(0, 300)`))
		last = fmt.Sprintf("%s: %+v, %v", href, v, err)
		return err == nil && v.Conn == "live" && len(v.Jobs) > 0 // errors while the browser navigates
	})
}

// servedSerial returns a function that connects to addr as domain, trusting
// only the root in rootFile, and returns the serial of the certificate it was
// served ("" when the handshake fails).
func servedSerial(t *testing.T, rootFile, domain, addr string) func() string {
	pem, err := os.ReadFile(rootFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", rootFile)
	}
	return func() string {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: domain, RootCAs: roots})
		if err != nil {
			return ""
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
	}
}

// dirsNamedIn returns the first match of each pattern's group in s.
func dirsNamedIn(s string, patterns ...string) []string {
	var out []string
	for _, p := range patterns {
		if m := regexp.MustCompile(p).FindStringSubmatch(s); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

func TestDevWithoutPostgreSQLNamesThePackageToInstall(t *testing.T) {
	r := dev(t, "--http-base", "-1", "--pg-bindir", filepath.Join(t.TempDir(), "no-postgres"))
	if r.Code != 1 || !strings.Contains(r.Stderr, "install the Debian package postgresql-15") {
		t.Fatalf("dev without PostgreSQL's binaries: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
}
