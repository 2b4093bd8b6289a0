package devcluster

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// cluster is a supervisor on 127.0.0.1:9470 with instances on 9471 to 9473 and
// no processes: enough for the control server's rules.
func cluster() *Cluster {
	c := &Cluster{controlURL: "http://127.0.0.1:9470", out: &lineWriter{w: io.Discard}, log: slog.New(slog.DiscardHandler)}
	for i := 1; i <= 3; i++ {
		c.children = append(c.children, &child{c: c, name: "server-" + strconv.Itoa(i), port: 9470 + i,
			page: "http://127.0.0.1:" + strconv.Itoa(9470+i) + "/status/", state: stateExited})
	}
	return c
}

func post(t *testing.T, h http.Handler, target string, header http.Header, form url.Values) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestTheControlServerAnswersOnlyTheClustersOwnPages(t *testing.T) {
	c := cluster()
	h := c.checkOrigin(http.HandlerFunc(c.act))
	form := url.Values{"action": {"frobnicate"}}

	for _, origin := range []string{"http://evil.example", "http://127.0.0.1:8080", "https://127.0.0.1:9471", "null"} {
		if w := post(t, h, "/dev/kill?instance=server-1", http.Header{"Origin": {origin}}, form); w.Code != http.StatusForbidden {
			t.Errorf("Origin %s: %d, want 403", origin, w.Code)
		}
	}
	for _, origin := range []string{"http://127.0.0.1:9471", "http://localhost:9473", "http://127.0.0.1:9470"} {
		w := post(t, h, "/dev/resume?instance=server-1", http.Header{"Origin": {origin}}, nil)
		if w.Code == http.StatusForbidden || w.Header().Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("Origin %s: %d, CORS %q; want it served, and readable by that page", origin, w.Code, w.Header().Get("Access-Control-Allow-Origin"))
		}
	}
	if w := post(t, h, "/dev/resume?instance=server-1", nil, nil); w.Code == http.StatusForbidden {
		t.Errorf("without Origin (curl): 403")
	}
}

func TestTheControlServerSaysWhatIsWrongWithARequest(t *testing.T) {
	c := cluster()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /dev/{action}", c.act)
	for target, want := range map[string]string{
		"/dev/frobnicate?instance=server-1":     `unknown action "frobnicate"`,
		"/dev/kill":                             "give instance=NAME or job=NAME",
		"/dev/kill?instance=server-9":           `no instance "server-9"`,
		"/dev/kill?instance=server-1&job=pulse": "not both",
		"/dev/resign":                           "resign needs job=NAME",
		"/dev/resume?instance=server-1":         "server-1 is not paused",
	} {
		w := post(t, mux, target, http.Header{"Accept": {"application/json"}}, nil)
		var body struct{ Error string }
		if w.Code != http.StatusBadRequest || json.Unmarshal(w.Body.Bytes(), &body) != nil || !strings.Contains(body.Error, want) {
			t.Errorf("POST %s: %d %s; want 400 saying %q", target, w.Code, w.Body, want)
		}
	}
	if w := post(t, mux, "/dev/kill?instance=server-2", nil, nil); !strings.Contains(w.Body.String(), "server-2 is not running") {
		t.Errorf("kill of an exited instance: %d %s", w.Code, w.Body)
	}
}

func TestAFormPostWithoutJavaScriptIsSentBackToItsPage(t *testing.T) {
	c := cluster()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /dev/{action}", c.act)
	html := http.Header{"Accept": {"text/html,application/xhtml+xml"}}
	// resume with nothing paused succeeds and changes nothing
	w := post(t, mux, "/dev/resume", html, url.Values{"back": {"http://127.0.0.1:9472/status/?window=1m"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "http://127.0.0.1:9472/status/?window=1m" {
		t.Errorf("form post: %d to %q; want 303 back to the page", w.Code, w.Header().Get("Location"))
	}
	w = post(t, mux, "/dev/resume", html, url.Values{"back": {"http://evil.example/"}})
	if w.Code == http.StatusSeeOther {
		t.Errorf("form post redirected to %q, which is not one of the cluster's pages", w.Header().Get("Location"))
	}
}

func TestStartRemovesTheFoldersOfAnEarlierDevThatWasKilled(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(name, pid string) string {
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if pid != "" {
			if err := os.WriteFile(filepath.Join(dir, "dev.pid"), []byte(pid), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	stalePG := mk(dirPrefix+"pg-111", "")
	stale := mk(dirPrefix+"222", strconv.Itoa(gone.Process.Pid))
	if err := os.WriteFile(filepath.Join(stale, "pgdir"), []byte(stalePG), 0o600); err != nil {
		t.Fatal(err)
	}
	running := mk(dirPrefix+"333", strconv.Itoa(os.Getpid()))
	unknown := mk(dirPrefix+"444", "")
	otherPG := mk(dirPrefix+"pg-555", "")

	sweepStale(slog.New(slog.DiscardHandler))
	for dir, kept := range map[string]bool{stale: false, stalePG: false, running: true, unknown: true, otherPG: true} {
		_, err := os.Stat(dir)
		if exists := err == nil; exists != kept {
			t.Errorf("%s: exists %v, want %v", filepath.Base(dir), exists, kept)
		}
	}
}
