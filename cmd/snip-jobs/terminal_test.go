package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/jobs/certrenew"
	"github.com/snip/snip-jobs/scheduler/status"
	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
	"github.com/snip/snip-jobs/testbench/etcdtest"
)

// hostile is text a terminal would obey: retitle the window (OSC 0), clear
// the screen (CSI 2J), C1 controls (CSI, NEL), and every bidi control (the
// right-to-left override among them).
const hostile = "\x1b]0;pwned\x07\x1b[2J\u009b31m\u0085\u0080\u009f" +
	"\u202e\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069"

// hostileEscaped is how the CLI prints it.
const hostileEscaped = `\x1b]0;pwned\x07\x1b[2J\u009b31m\u0085\u0080\u009f` +
	`\u202e\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069`

// hostileJSON is how --json writes it: JSON escapes, which decode to it.
const hostileJSON = `\u001b]0;pwned\u0007\u001b[2J\u009b31m\u0085\u0080\u009f` +
	`\u202e\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069`

// obeyed reports whether r is a character of hostile a terminal obeys.
func obeyed(r rune) bool {
	return r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r <= 0x9f || r == 0x61c ||
		r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

// Strings from the database reach the operator's terminal escaped — a
// customer's domain and the CA's error text in certs list, a run's error in
// status and history, a link's slug in report show, an error quoting stored
// text — and --json (certs list, status, history) escapes them too, as JSON
// escapes that decode to the data as stored.
func TestStringsFromTheDatabaseArePrintedEscapedInTablesAndInJSON(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.Start(t, 1)
	url := benchtest.PostgresDB(t)
	path := writeConfig(t, config{instance: "server-1", endpoints: etcd.Endpoints(), adminPort: freePort(t), jobs: certsJobYAML + reportJobYAML})
	env := dbEnv(migrate(t, path, url))
	domain := "shop" + hostile + ".example.com"
	dbtest.Exec(t, url, `INSERT INTO custom_domains (domain) VALUES ('`+domain+`');
		INSERT INTO certrenew_domains (domain, source, failures, next_attempt_at, last_error, last_error_reason, last_error_at, token)
		VALUES ('good.example.com', 'good.example.com', 1, now() + interval '1 hour', 'the CA said: `+hostile+`', 'dns', now(), 7);
		INSERT INTO custom_domains (domain) VALUES ('good.example.com');
		INSERT INTO job_runs (job, instance, token, started_at, finished_at, result, error)
		VALUES ('weekly-report', 'server-1', 7, now(), now(), 'error', 'boom: `+hostile+`');
		INSERT INTO weekly_reports (week, job, time_zone, week_start, week_end, body, body_text, body_csv, token, instance)
		VALUES ('2026-W47', 'weekly-report', 'UTC', '2026-11-16Z', '2026-11-23Z', '{}',
			E'Top links\n\t1. go/`+hostile+` 40 clicks\n', '', 7, 'server-1')`)

	check := func(what string, r result, wants ...string) {
		t.Helper()
		for _, out := range []string{r.stdout, r.stderr} {
			if strings.ContainsFunc(out, obeyed) {
				t.Errorf("%s printed a terminal control raw:\n%q", what, out)
			}
		}
		for _, want := range wants {
			if !strings.Contains(r.stdout+r.stderr, want) {
				t.Errorf("%s lacks %q:\n%s%s", what, want, r.stdout, r.stderr)
			}
		}
	}
	list := snip(t, env, "certs", "list", "--config", path)
	check("certs list", list, "shop"+hostileEscaped+".example.com", "good.example.com: the CA said: "+hostileEscaped)

	var statuses []certrenew.DomainStatus
	js := snip(t, env, "certs", "list", "--json", "--config", path)
	check("certs list --json", js, `"shop`+hostileJSON+`.example.com"`, `"the CA said: `+hostileJSON+`"`)
	if err := json.Unmarshal([]byte(js.stdout), &statuses); err != nil || js.code != 0 {
		t.Fatalf("certs list --json: exit %d, %v\n%s", js.code, err, js.stdout)
	}
	stored := map[string]string{}
	for _, d := range statuses {
		stored[d.Domain] = d.Error
	}
	if _, ok := stored[domain]; !ok || stored["good.example.com"] != "the CA said: "+hostile {
		t.Errorf("certs list --json changed the stored strings: %q", stored)
	}

	st := snip(t, env, "status", "--config", path)
	check("status", st, "weekly-report: last run on server-1 (token 7): error: boom: "+hostileEscaped)
	var sj status.Cluster
	stj := snip(t, env, "status", "--json", "--config", path)
	check("status --json", stj, `"boom: `+hostileJSON+`"`)
	if err := json.Unmarshal([]byte(stj.stdout), &sj); err != nil {
		t.Fatalf("status --json: %v\n%s", err, stj.stdout)
	}
	for _, j := range sj.Jobs {
		if j.Name == "weekly-report" && (j.LastRun == nil || j.LastRun.Error != "boom: "+hostile) {
			t.Errorf("status --json: weekly-report's last run %+v, want the error as stored", j.LastRun)
		}
	}

	check("history", snip(t, env, "history", "weekly-report", "--config", path), "boom: "+hostileEscaped)
	check("history --json", snip(t, env, "history", "weekly-report", "--json", "--config", path), `"boom: `+hostileJSON+`"`)

	show := snip(t, env, "report", "show", "--week", "2026-W47", "--config", path)
	check("report show", show, "Top links\n\t1. go/"+hostileEscaped+" 40 clicks\n")

	// An error quoting stored text: a certs retry of the hostile domain.
	retry := snip(t, env, "certs", "retry", domain, "--config", path)
	check("certs retry", retry)
}
