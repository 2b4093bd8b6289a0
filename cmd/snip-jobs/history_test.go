package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/testbench/benchtest"
	"github.com/snip/snip-jobs/testbench/dbtest"
)

// history shows a job's runs from the database alone (the config's etcd
// answers nothing), newest first, as the runtime role: each trigger, the
// instance, token, slot, duration (running while no end is recorded), result
// and error, every stored string escaped, an error's line breaks too.
// --limit keeps the newest N; --json decodes to the text as stored. A job
// that is not in the config file is refused naming the file; one with no run
// says so.
func TestHistoryShowsAJobsRunsNewestFirstEscapedAndAsJSON(t *testing.T) {
	t.Parallel()
	url := benchtest.PostgresDB(t)
	path := writeConfig(t, config{instance: "server-1", endpoints: []string{"http://127.0.0.1:1"}, adminPort: freePort(t),
		jobs: reportJobYAML + pulseJob})
	env := dbEnv(migrate(t, path, url))
	// Oldest first: a run on time, a catch-up of a missed slot that failed
	// with a hostile error over two lines, an operator's run that panicked,
	// and one still running. Another job's runs are not weekly-report's.
	dbtest.Exec(t, url, `INSERT INTO job_runs (job, instance, token, slot, trigger, started_at, finished_at, result, error) VALUES
		('weekly-report', 'server-1', 40, '2026-11-16 07:00Z', 'schedule', '2026-11-16 07:00:00.2Z', '2026-11-16 07:00:01.7Z', 'ok', NULL),
		('weekly-report', 'server-2', 41, '2026-11-23 07:00Z', 'catch-up', '2026-11-24 09:30:00Z', '2026-11-24 09:30:00.012Z', 'error',
			E'smtp: 550 \n`+hostile+`'),
		('pulse', 'server-3', 7, NULL, 'schedule', '2026-11-24 09:31:00Z', '2026-11-24 09:31:00.5Z', 'ok', NULL),
		('weekly-report', 'server-`+hostile+`', 42, NULL, 'manual', '2026-11-25 10:00:00Z', '2026-11-25 10:02:05Z', 'panic', 'job panicked: `+hostile+`'),
		('weekly-report', 'server-1', 43, '2026-11-30 07:00Z', 'schedule', '2026-11-30 07:00:00Z', NULL, NULL, NULL)`)

	r := snip(t, env, "history", "weekly-report", "--config", path)
	if r.code != 0 {
		t.Fatalf("history: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.ContainsFunc(r.stdout+r.stderr, obeyed) {
		t.Errorf("history printed a terminal control raw:\n%q", r.stdout)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	want := [][]string{
		{"weekly-report: the newest 4 of 4 recorded runs, newest first"},
		{},
		{"STARTED", "DURATION", "TRIGGER", "INSTANCE", "TOKEN", "SLOT", "RESULT", "ERROR"},
		{"2026-11-30T07:00:00Z", "running", "schedule", "server-1", "43", "2026-11-30T07:00:00Z", "-", "-"},
		{"2026-11-25T10:00:00Z", "2m5s", "manual", "server-" + hostileEscaped, "42", "-", "panic", "job panicked: " + hostileEscaped},
		{"2026-11-24T09:30:00Z", "12ms", "catch-up", "server-2", "41", "2026-11-23T07:00:00Z", "error", `smtp: 550 \x0a` + hostileEscaped},
		{"2026-11-16T07:00:00Z", "1.5s", "schedule", "server-1", "40", "2026-11-16T07:00:00Z", "ok", "-"},
	}
	if len(lines) != len(want) {
		t.Fatalf("history printed %d lines, want %d:\n%s", len(lines), len(want), r.stdout)
	}
	for i, cells := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(cells, " ") {
			t.Errorf("line %d: %q\nwant the cells %q", i+1, lines[i], cells)
		}
	}

	r = snip(t, env, "history", "weekly-report", "--limit", "2", "--config", path)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "weekly-report: the newest 2 of 4 recorded runs") ||
		len(linesWith(r.stdout, "2026-11-")) != 2 || len(linesWith(r.stdout, "2026-11-30T07:00:00Z", "running")) != 1 ||
		len(linesWith(r.stdout, "2026-11-25T10:00:00Z", "manual")) != 1 {
		t.Errorf("history --limit 2: exit %d, want the two newest runs\n%s%s", r.code, r.stdout, r.stderr)
	}

	r = snip(t, env, "history", "--json", "weekly-report", "--config", path)
	if strings.ContainsFunc(r.stdout, obeyed) || !strings.Contains(r.stdout, `"job panicked: `+hostileJSON+`"`) {
		t.Errorf("history --json does not escape the stored text as JSON escapes:\n%s", r.stdout)
	}
	var h runHistory
	if err := json.Unmarshal([]byte(r.stdout), &h); r.code != 0 || err != nil {
		t.Fatalf("history --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if h.Job != "weekly-report" || h.Recorded != 4 || len(h.Runs) != 4 {
		t.Fatalf("history --json: job %q, %d recorded, %d runs; want weekly-report, 4, 4", h.Job, h.Recorded, len(h.Runs))
	}
	for i, w := range []struct{ trigger, instance, result, err string }{
		{"schedule", "server-1", "", ""},
		{"manual", "server-" + hostile, "panic", "job panicked: " + hostile},
		{"catch-up", "server-2", "error", "smtp: 550 \n" + hostile},
		{"schedule", "server-1", "ok", ""},
	} {
		got := h.Runs[i]
		if got.Trigger != w.trigger || got.Instance != w.instance || got.Result != w.result || got.Error != w.err {
			t.Errorf("history --json run %d: %+v\nwant trigger %q, instance %q, result %q, error %q", i, got, w.trigger, w.instance, w.result, w.err)
		}
	}
	if first, last := h.Runs[0], h.Runs[3]; !first.Finished.IsZero() || first.Slot.IsZero() ||
		last.Finished.Sub(last.Started) != 1500*time.Millisecond || last.Token != 40 {
		t.Errorf("history --json: newest %+v, oldest %+v; want the newest unfinished, the oldest 1.5 s long with token 40", first, last)
	}

	r = snip(t, env, "history", "pulse", "--limit", "1000", "--config", path)
	if r.code != 0 || len(linesWith(r.stdout, "2026-11-24T09:31:00Z", "500ms", "schedule", "server-3", "7", "-", "ok")) != 1 ||
		strings.Contains(r.stdout, "weekly") {
		t.Errorf("history pulse: exit %d, want its one run only\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A job of the config that never ran; a job the config does not have.
	dbtest.Exec(t, url, `DELETE FROM job_runs WHERE job = 'pulse'`)
	if r := snip(t, env, "history", "pulse", "--config", path); r.code != 0 || r.stdout != "pulse has no recorded runs\n" {
		t.Errorf("history of a job without runs: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = snip(t, env, "history", "pulse", "--json", "--config", path)
	var none runHistory
	if err := json.Unmarshal([]byte(r.stdout), &none); r.code != 0 || err != nil || none.Job != "pulse" || none.Recorded != 0 ||
		none.Runs == nil || len(none.Runs) != 0 || !strings.Contains(r.stdout, `"runs": []`) {
		t.Errorf("history --json of a job without runs: exit %d, %v; want pulse, 0 recorded, an empty list of runs\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	r = snip(t, env, "history", "cert-renewer", "--config", path)
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, path+` has no job called "cert-renewer"`) {
		t.Errorf("history of a job not in the config: exit %d, want 2 and the file named\n%s%s", r.code, r.stdout, r.stderr)
	}

	for _, args := range [][]string{
		{"history", "--config", path},
		{"history", "weekly-report", "pulse", "--config", path},
		{"history", "weekly-report", "--limit", "0", "--config", path},
		{"history", "weekly-report", "--limit", "1001", "--config", path},
	} {
		if r := snip(t, env, args...); r.code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage)\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
}
