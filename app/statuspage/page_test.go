package statuspage

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/app/clusterview"
	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	"github.com/snip/snip-jobs/leadership/etcdlease"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

func TestMain(m *testing.M) { os.Exit(benchtest.RunMain(m)) }

// richSnapshot has a bit of everything: an ongoing term, a dead instance's
// unclosed one, a paused one's late end, gaps, a refused write, a job that
// runs everywhere and the dev supervisor's view.
func richSnapshot() Snapshot {
	s := snap(40,
		term(10, "server-a", 10*time.Second, 60*time.Second),
		term(20, "server-b", 70*time.Second, open),
		term(30, "server-c", 130*time.Second, 200*time.Second),
		term(40, "server-a", 190*time.Second, open),
	)
	s.Terms[0].Reason = "resign-request"
	s.Jobs[0].Leader = &status.Leader{Instance: "server-a", Token: 40, Since: now.Add(-110 * time.Second), LeaseTTLSeconds: 5}
	s.Jobs[0].LastRun = &status.RunRecord{Instance: "server-a", Token: 40, Started: now.Add(-time.Second), Result: "ok"}
	s.Jobs = append(s.Jobs, status.Job{Name: "prune", Type: "sql", Mode: "everywhere", Schedule: "every 30s"})
	s.Rejections = []status.Rejection{{Resource: "pulse", Token: 30, Current: 40, Instance: "server-c", At: at(199 * time.Second)}}
	s.Instances = []Instance{
		{Instance: status.Instance{Name: "server-a", Up: true, LeaseTTLSeconds: 5, Leads: 1}, Terms: 2, Process: "running"},
		{Instance: status.Instance{Name: "server-b"}, Terms: 1, Process: "exited"},
		{Instance: status.Instance{Name: "server-c", Up: true}, Terms: 1, Process: "paused"}}
	s.Dev = &DevState{Control: "http://127.0.0.1:9470", Instances: []DevInstance{
		{Name: "server-a", PID: 11, State: "running", Page: "http://127.0.0.1:9471/status/"},
		{Name: "server-b", PID: 12, State: "exited", Exit: "signal: killed", Page: "http://127.0.0.1:9472/status/"},
		{Name: "server-c", PID: 13, State: "paused", Page: "http://127.0.0.1:9473/status/"},
	}}
	return s
}

func render(t *testing.T, name string, s Snapshot) string {
	t.Helper()
	v := view{Snapshot: s, TL: Layout(s), Back: "http://127.0.0.1:9471/status/"}
	var buf bytes.Buffer
	if err := tmpl.ExecuteTemplate(&buf, name, v); err != nil {
		t.Fatalf("render %s: %v", name, err)
	}
	return buf.String()
}

func TestTheTimelineIsWellFormedSVGWithATermPerRecordAndItsMarks(t *testing.T) {
	out := render(t, "live", richSnapshot())
	svg := regexp.MustCompile(`(?s)<svg class="timeline".*?</svg>`).FindString(out)
	if svg == "" {
		t.Fatalf("no timeline in:\n%s", out)
	}
	var doc struct {
		Lanes []struct {
			Job   string `xml:"data-job,attr"`
			Terms []struct {
				Class string `xml:"class,attr"`
				Token string `xml:"data-token,attr"`
			} `xml:"g"`
		} `xml:"g"`
	}
	if err := xml.Unmarshal([]byte(svg), &doc); err != nil {
		t.Fatalf("the timeline is not well-formed XML: %v\n%s", err, svg)
	}
	if len(doc.Lanes) != 1 || doc.Lanes[0].Job != "pulse" {
		t.Fatalf("lanes %+v; want one, pulse (prune runs everywhere: no lane)", doc.Lanes)
	}
	var got []string
	for _, g := range doc.Lanes[0].Terms {
		got = append(got, g.Class+"/"+g.Token)
	}
	want := []string{"term ended/10", "term unclosed/20", "term ended/30", "term ongoing/40", "rejection/30"}
	if !equal(got, want) {
		t.Errorf("lane pulse draws %v, want %v", got, want)
	}
	for _, s := range []string{`class="gap`, `class="tail"`, `<title>write refused by the fence`} {
		if !strings.Contains(svg, s) {
			t.Errorf("timeline lacks %s", s)
		}
	}
}

func TestThePageIsReadableWithoutJavaScript(t *testing.T) {
	out := render(t, "page", richSnapshot())
	for _, want := range []string{
		`<noscript><meta http-equiv="refresh" content="5"></noscript>`,
		`<tr class="job" data-job="pulse" data-mode="leader" data-leader="server-a" data-token="40">`,
		`<tr class="job" data-job="prune" data-mode="everywhere" data-leader="" data-token="">`,
		`<tr class="instance" data-instance="server-b" data-up="false" data-leads="0">`,
		`<span class="process paused">paused</span>`,
		`<span class="up">up</span> <span class="muted" title="time left on its etcd lease: near the TTL while it renews, counting down once it stopped">lease 5s</span>`,
		// the dev buttons are plain forms that post to the supervisor
		`<form class="dev" method="post" action="http://127.0.0.1:9470/dev/kill"><input type="hidden" name="job" value="pulse">`,
		`<input type="hidden" name="back" value="http://127.0.0.1:9471/status/">`,
		`data-action="resume" data-job="" data-instance="server-c"`,
		`<a href="http://127.0.0.1:9472/status/">server-b</a>`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	// Outside dev: no buttons.
	s := richSnapshot()
	s.Dev = nil
	if out := render(t, "page", s); strings.Contains(out, "<form") || strings.Contains(out, "break it") {
		t.Error("the page shows dev buttons without a dev supervisor")
	}
}

// The page of an instance reads the whole cluster: the leader and the
// instances from etcd, last runs and the term history from PostgreSQL.
func TestThePageReadsTheClusterFromEtcdAndPostgres(t *testing.T) {
	ctx := context.Background()
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	_, pool := dbtest.New(t)
	const prefix = "/statuspage-test"

	sess, err := etcdlease.NewSession(etcdlease.Config{Client: etcd.Client(t), Prefix: prefix, Config: leadership.Config{Instance: "server-a", TTL: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close(context.Background()) })
	term, err := sess.Campaign(ctx, "pulse")
	if err != nil {
		t.Fatal(err)
	}
	benchtest.Exec(t, pool, `INSERT INTO job_terms (job, token, instance, started_at, ended_at, reason) VALUES ('pulse', $1, 'server-b', now() - interval '1 minute', NULL, NULL)`, term.Token()-1)
	benchtest.Exec(t, pool, `INSERT INTO job_terms (job, token, instance) VALUES ('pulse', $1, 'server-a')`, term.Token())
	benchtest.Exec(t, pool, `INSERT INTO fence_rejections (resource, token, current, instance) VALUES ('pulse', $1, $2, 'server-b')`, term.Token()-1, term.Token())
	benchtest.Exec(t, pool, `INSERT INTO job_runs (job, instance, token, finished_at, result) VALUES ('pulse', 'server-a', $1, now(), 'ok')`, term.Token())

	page, err := New(Config{Instance: "server-a", Version: "test", Leadership: clusterview.Etcd(cli, prefix), Pool: pool, Jobs: []configs.Job{
		{Name: "pulse", Type: "sql", Singleton: true, Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Second}},
		{Name: "prune", Type: "sql", Schedule: configs.Schedule{Kind: configs.Interval, Every: time.Minute}},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page)
	t.Cleanup(srv.Close)

	var s Snapshot
	if err := json.Unmarshal([]byte(get(t, srv.URL+"/status/cluster.json", http.StatusOK)), &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Errors) > 0 {
		t.Fatalf("errors: %v", s.Errors)
	}
	pulse := s.Jobs[0]
	if pulse.Mode != "leader" || pulse.Leader == nil || pulse.Leader.Instance != "server-a" || pulse.Leader.Token != term.Token() ||
		pulse.Leader.LeaseTTLSeconds <= 0 || pulse.LastRun == nil || pulse.LastRun.Result != "ok" {
		t.Errorf("pulse: %+v (leader %+v)", pulse, pulse.Leader)
	}
	if s.Jobs[1].Mode != "everywhere" || s.Jobs[1].Leader != nil {
		t.Errorf("prune: %+v", s.Jobs[1])
	}
	if len(s.Instances) != 2 || s.Instances[0].Name != "server-a" || !s.Instances[0].Up || s.Instances[0].Leads != 1 ||
		s.Instances[0].LeaseTTLSeconds <= 0 || s.Instances[0].LeaseTTLSeconds > 2 ||
		s.Instances[1].Name != "server-b" || s.Instances[1].Up || s.Instances[1].Terms != 1 || s.Instances[1].LeaseTTLSeconds != 0 {
		t.Errorf("instances: %+v; want server-a up on a live 2 s lease leading one job, server-b down with one term in the window", s.Instances)
	}
	if len(s.Terms) != 2 || len(s.Rejections) != 1 || !s.LeadersKnown || s.WindowSeconds != 300 {
		t.Errorf("history: %d terms, %d rejections, leaders known %v, window %v", len(s.Terms), len(s.Rejections), s.LeadersKnown, s.WindowSeconds)
	}

	// Without ?window=, the page fits its window to the history (a minute
	// old: two minutes), while the JSON keeps the window it read.
	if html := get(t, srv.URL+"/status/", http.StatusOK); !strings.Contains(html, `data-window="2m">who led each singleton, last 2m`) ||
		!strings.Contains(html, `<a href="./" title="the history&#39;s age, up to 5m" class="current" aria-current="true">fit</a>`) {
		t.Errorf("the page without ?window= is not drawn over the history's age (2m):\n%s", html)
	}
	html := get(t, srv.URL+"/status/?window=1m", http.StatusOK)
	for _, want := range []string{
		`data-leader="server-a"`,
		`<g class="term unclosed" data-token="` + itoa(term.Token()-1) + `" data-instance="server-b"`,
		`<g class="term ongoing" data-token="` + itoa(term.Token()) + `" data-instance="server-a"`,
		`<g class="rejection" data-token="` + itoa(term.Token()-1) + `"`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if live := get(t, srv.URL+"/status/live", http.StatusOK); strings.Contains(live, "<html") || !strings.Contains(live, `class="timeline"`) {
		t.Errorf("/status/live is not the live part alone:\n%s", live)
	}
	get(t, srv.URL+"/status/?window=2s", http.StatusBadRequest)
	if css := get(t, srv.URL+"/status/static/style.css", http.StatusOK); !strings.Contains(css, "svg.timeline") {
		t.Error("style.css is not served")
	}
	if js := get(t, srv.URL+"/status/static/page.js", http.StatusOK); !strings.Contains(js, "fetch('live'") {
		t.Error("page.js is not served")
	}
}
