package certsync_test

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/snip/snip-jobs/jobs/certsync"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/certtest"
)

// Snip's web tier behind a real nginx configured with docs/certrenew.md's
// snippet: port 80 answers the short links and proxies the CA's HTTP-01
// requests to another instance's challenge listener; port 443 serves, by
// SNI, the files a certsync job keeps in sync.
func TestNginxServesTheSyncedCertificatesBySNIAndARenewalWithoutRestartOrReload(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	base := openDir(t)
	dir := filepath.Join(base, "certs") // certsync creates it
	group := fileGroup(t)

	shortLinks := certtest.ServeHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, "https://example.com/launch-video", http.StatusFound)
	}))
	challenges := serveChallenges(t, r.Challenges("server-2 challenges")) // not the ordering instance's
	port80, port443 := benchtest.Listen(t), benchtest.Listen(t)
	ngx := startNginx(t, base, docsSnippet(t, map[string]string{
		"listen 80 ":           "listen " + port80.Addr().String() + " ",
		"listen 443 ":          "listen " + port443.Addr().String() + " ",
		"127.0.0.1:8080":       challenges,
		"127.0.0.1:3000":       shortLinks,
		"/var/lib/snip-certs/": dir + "/",
	}), port80, port443)
	web80, web443 := port80.Addr().String(), port443.Addr().String()

	sync := startSyncer(t, r, func(o *certsync.Options) { o.Dir, o.Group = dir, group })
	sync.waitFiles(t, map[string]string{})

	// The CA validates through nginx's port 80: the renewer has no
	// challenge listener of its own.
	r.Route(web80)
	r.AddDomains("shop.test", "blog.test")
	r.Pass()
	want := map[string]string{"shop.test": r.Serial("shop.test"), "blog.test": r.Serial("blog.test")}
	// (nginx logs a request once it has answered it: the log may lag the CA.)
	benchtest.Eventually(t, "nginx's access log showing an HTTP-01 request answered 200 per domain",
		func() bool { return challengesProxied(t, ngx) >= 2 })

	sync.waitFiles(t, want)
	roots := r.CA.IssuerRoots()
	for d, serial := range want {
		got, status, err := get(roots, web443, d)
		if err != nil || got != serial || status != http.StatusFound {
			t.Errorf("https://%s/abc through nginx: serial %q, status %d, %v; want %s and the short link's redirect", d, got, status, err, serial)
		}
		fi, err := os.Stat(filepath.Join(dir, d+".pem"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o640 || int(fi.Sys().(*syscall.Stat_t).Gid) != groupID(t, group) {
			t.Errorf("%s.pem: mode %v, gid %d; want 0640 and group %s (nginx's workers read it)", d, fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid, group)
		}
	}
	if got := entries(t, dir); strings.Join(got, " ") != ".certsync blog.test.pem shop.test.pem" {
		t.Errorf("the directory holds %v, want the two files and the job's own subdirectory", got)
	}

	// Names that have no file, or are not names: no certificate, and
	// nothing read outside the directory (base/evil.pem is a valid pair).
	if err := os.WriteFile(filepath.Join(base, "evil.pem"), readFile(t, filepath.Join(dir, "shop.test.pem")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"unknown.test", "../evil", "../certs/shop.test", ""} {
		if crt, err := handshake(web443, name); err == nil {
			t.Errorf("SNI %q: nginx presented %v, want the handshake refused", name, crt.Subject)
		}
	}

	// A renewal is served by the same nginx, without a reload.
	r.DueNow("shop.test")
	r.Pass()
	renewed := r.Serial("shop.test")
	if renewed == want["shop.test"] {
		t.Fatal("the renewal stored no new certificate")
	}
	want["shop.test"] = renewed
	sync.waitFiles(t, want)
	for d, serial := range want {
		if got, _, err := get(roots, web443, d); err != nil || got != serial {
			t.Errorf("after the renewal, https://%s: serial %q, %v; want %s", d, got, err, serial)
		}
	}

	// A certificate no longer current: its file goes, and nginx refuses
	// the name.
	benchtest.Exec(t, r.Pool, `UPDATE certrenew_certificates SET current = false WHERE domain = 'blog.test' AND current`)
	delete(want, "blog.test")
	sync.waitFiles(t, want)
	if _, _, err := get(roots, web443, "blog.test"); err == nil {
		t.Error("blog.test is still served after its certificate stopped being current")
	}

	ngx.running(t)
	if log := ngx.log(t); strings.Contains(log, "reconfiguring") || strings.Contains(log, "signal 1 ") {
		t.Errorf("nginx was reloaded; its log:\n%s", log)
	}
	if sync.metric(t, "snip_certsync_reloads_total", "result", "ok") != 0 {
		t.Error("the job ran a reload command it was not given")
	}
}

// challengesProxied counts the HTTP-01 requests nginx answered 200 on port 80.
func challengesProxied(t *testing.T, n *nginx) int {
	t.Helper()
	b, err := os.ReadFile(n.accessLog)
	if err != nil {
		t.Fatal(err)
	}
	return len(regexp.MustCompile(`"GET /\.well-known/acme-challenge/[^ ]+ HTTP/1\.[01]" 200 `).FindAll(b, -1))
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
