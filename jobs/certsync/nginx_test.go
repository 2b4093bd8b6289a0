package certsync_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/benchtest"
)

// nginxBinary is Debian's nginx-light, which .ci/run installs.
const nginxBinary = "/usr/sbin/nginx"

// nginx is a real nginx serving an http-level config on ports the test
// holds: it inherits the listening sockets through its NGINX variable (the
// mechanism of its binary upgrade), so no other test can take them between
// a pick and a bind. It runs in the foreground, in its own prefix.
type nginx struct {
	prefix    string
	master    int
	errorLog  string
	accessLog string
	exited    chan struct{}
	waitErr   error
}

// startNginx starts nginx with httpConf inside its http block, listening on
// the sockets of lns (which it inherits; the test's copies are closed). As
// root, its workers run as nobody:nogroup, as a packaged nginx's run as an
// unprivileged user; otherwise as this user.
func startNginx(t testing.TB, prefix, httpConf string, lns ...*net.TCPListener) *nginx {
	t.Helper()
	if _, err := os.Stat(nginxBinary); err != nil {
		t.Fatalf("nginx is required (Debian's nginx-light; .ci/run installs it): %v", err)
	}
	n := &nginx{prefix: prefix, errorLog: filepath.Join(prefix, "error.log"), accessLog: filepath.Join(prefix, "access.log"),
		exited: make(chan struct{})}
	user := ""
	if os.Geteuid() == 0 {
		user = "user nobody nogroup;"
	}
	conf := fmt.Sprintf(`%s
worker_processes 1;
error_log %s info;
pid %s;
lock_file %s;
events { worker_connections 256; }
http {
    access_log %s;
    client_body_temp_path %s;
    proxy_temp_path %s;
    fastcgi_temp_path %s;
    uwsgi_temp_path %s;
    scgi_temp_path %s;

%s
}
`, user, n.errorLog, filepath.Join(prefix, "nginx.pid"), filepath.Join(prefix, "nginx.lock"), n.accessLog,
		filepath.Join(prefix, "body"), filepath.Join(prefix, "proxy"), filepath.Join(prefix, "fastcgi"),
		filepath.Join(prefix, "uwsgi"), filepath.Join(prefix, "scgi"), httpConf)
	confPath := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-p", prefix, "-c", confPath, "-e", n.errorLog}
	if out, err := exec.Command(nginxBinary, append(args, "-t")...).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s\nthe config:\n%s", err, out, conf)
	}

	cmd := exec.Command(nginxBinary, append(args, "-g", "daemon off;")...)
	var fds []string
	for i, ln := range lns {
		f, err := ln.File()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
		fds = append(fds, fmt.Sprint(3+i))
	}
	cmd.Env = append(os.Environ(), "NGINX="+strings.Join(fds, ";")+";")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	for _, ln := range lns {
		ln.Close() // nginx holds the sockets now; a connection must not wait on the test's copy
	}
	n.master = cmd.Process.Pid
	go func() {
		n.waitErr = cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful stop
		select {
		case <-n.exited:
		case <-time.After(benchtest.Patience):
			_ = cmd.Process.Kill()
			<-n.exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(n.errorLog)
			t.Logf("nginx's error log:\n%s", b)
		}
	})
	return n
}

// running fails the test if nginx's master has exited or is another
// process than the one started: no restart happened.
func (n *nginx) running(t *testing.T) {
	t.Helper()
	select {
	case <-n.exited:
		t.Fatalf("nginx exited: %v", n.waitErr)
	default:
	}
	b, err := os.ReadFile(filepath.Join(n.prefix, "nginx.pid"))
	if err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(n.master) {
		t.Fatalf("nginx's pid file says %q (%v), want the master started, %d", b, err, n.master)
	}
}

// log returns nginx's error log.
func (n *nginx) log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(n.errorLog)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docsSnippet is the nginx configuration of docs/certrenew.md's section
// "Serving the certificates", with its addresses replaced by the test's:
// the test runs the very text operators copy.
func docsSnippet(t *testing.T, replace map[string]string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "certrenew.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Serving the certificates\n")
	if !ok {
		t.Fatal(`docs/certrenew.md has no section "## Serving the certificates"`)
	}
	_, block, ok := strings.Cut(section, "\n```nginx\n")
	if !ok {
		t.Fatal("docs/certrenew.md's section \"Serving the certificates\" has no ```nginx block")
	}
	snippet, _, _ := strings.Cut(block, "\n```\n")
	for from, to := range replace {
		if !strings.Contains(snippet, from) {
			t.Fatalf("docs/certrenew.md's nginx snippet no longer contains %q, which the test replaces by %q:\n%s", from, to, snippet)
		}
		snippet = strings.ReplaceAll(snippet, from, to)
	}
	return snippet
}
