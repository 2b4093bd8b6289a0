package configs_test

import (
	"strings"
	"testing"
)

// Each case is a file with one problem; the problem must be reported (alone: no
// knock-on problems) at its line, in words containing the phrase, naming the job
// when it is inside one.
func TestEachProblemIsReportedAtItsLine(t *testing.T) {
	cases := []struct {
		name   string
		file   []byte
		line   int
		phrase string
		job    string // "" when the problem is outside any job
	}{
		// YAML itself.
		{"syntax error: unclosed flow mapping", lines(
			"instance: a",
			"etcd: {prefix: /x",
		), 2, "YAML syntax error", ""},
		{"syntax error: tab indentation", lines(
			"etcd:",
			"\tprefix: /x",
		), 2, "not tabs", ""},
		{"syntax error: unquoted @ descriptor", lines(
			"jobs:",
			"  - name: r",
			"    type: weeklyreport",
			"    cron: @weekly",
		), 4, `quote values that start with @`, ""},
		{"second YAML document", lines(
			"instance: a",
			"---",
			"instance: b",
		), 3, "only one YAML document", ""},
		{"alias without anchor", lines(
			"instance: *nowhere",
		), 1, "no anchor &nowhere", ""},

		// Unknown and duplicate keys.
		{"unknown top-level key, with a suggestion", lines(
			"instance: a",
			"job:",
			"  - name: x",
		), 2, `unknown key "job" (did you mean "jobs"?)`, ""},
		{"unknown nested key", lines(
			"etcd:",
			"  prefix: /x",
			"  dial_timout: 5s",
		), 3, `unknown key "dial_timout" in etcd (did you mean "dial_timeout"?)`, ""},
		{"unknown key two levels down", lines(
			"etcd:",
			"  endpoints: [https://e:2379]",
			"  tls:",
			"    certificate: /c.pem",
		), 4, `unknown key "certificate" in etcd.tls`, ""},
		{"unknown job key", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    evry: 1h",
		), 5, `unknown key "evry" (did you mean "every"?)`, "agg"},
		{"unknown option key", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    options:",
			"      batch_sise: 10",
		), 6, `unknown key "batch_sise" in options (did you mean "batch_size"?)`, "agg"},
		{"duplicate top-level key", lines(
			"instance: a",
			"log: {level: info}",
			"instance: b",
		), 3, `duplicate key "instance" (first at line 1)`, ""},
		{"duplicate nested key", lines(
			"log:",
			"  level: info",
			"  level: debug",
		), 3, `duplicate key "log.level" (first at line 2)`, ""},
		{"duplicate job key", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    type: certrenew",
		), 5, `duplicate key "type" (first at line 3)`, "agg"},
		{"duplicate option key", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    options:",
			"      batch_size: 10",
			"      batch_size: 20",
		), 7, `duplicate key "options.batch_size" (first at line 6)`, "agg"},

		// Job names and types.
		{"duplicate job name points at the second and names the first's line", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
		), 5, `job name "agg" is already used by the job at line 2`, "agg"},
		{"invalid job name", lines(
			"jobs:",
			"  - name: Weekly_Report",
			"    type: weeklyreport",
			"    cron: '0 8 * * MON'",
		), 2, "use lower-case letters, digits and '-'", "Weekly_Report"},
		{"job name starting with '-'", lines(
			"jobs:",
			"  - name: -agg",
			"    type: aggregator",
			"    continuous: true",
		), 2, "starting with a letter or digit", "-agg"},
		{"missing name", lines(
			"jobs:",
			"  - type: aggregator",
			"    continuous: true",
		), 2, "job has no name", ""},
		{"missing type", lines(
			"jobs:",
			"  - name: agg",
			"    continuous: true",
		), 2, "job has no type: add type: <one of aggregator, certrenew, weeklyreport>", "agg"},
		{"unknown type lists the known ones", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregate",
			"    continuous: true",
		), 3, `unknown job type "aggregate"; known types: aggregator, certrenew, weeklyreport`, "agg"},

		// Schedules.
		{"no schedule", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
		), 2, "job has no schedule", "agg"},
		{"continuous: false is no schedule", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: false",
		), 2, "job has no schedule", "agg"},
		{"two schedules", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    every: 1h",
		), 5, "more than one schedule: continuous (line 4), every (line 5); choose one", "agg"},
		{"three schedules", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    every: 1h",
			"    cron: '@daily'",
			"    continuous: true",
		), 5, "more than one schedule: every (line 4), cron (line 5), continuous (line 6)", "agg"},
		{"bad cron spec: the cron library's message", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '0 8 * * MONDAY'",
		), 4, `cron "0 8 * * MONDAY": failed to parse int from MONDAY`, "report"},
		{"cron spec with six fields", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '0 0 8 * * MON'",
		), 4, "expected exactly 5 fields", "report"},
		{"cron spec that never fires", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '0 8 30 2 *'",
		), 4, "never fires", "report"},
		{"cron @every belongs in every:", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '@every 1h'",
		), 4, "use every: for intervals", "report"},
		{"time zone inside the cron spec", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: 'TZ=Europe/Paris'",
		), 4, "put the time zone in timezone:", "report"},
		{"bad time zone", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '0 8 * * MON'",
			"    timezone: Europe/Pariss",
		), 5, `timezone "Europe/Pariss" is not a known time zone`, "report"},
		{"Local time zone", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '0 8 * * MON'",
			"    timezone: Local",
		), 5, `timezone "Local" is not allowed`, "report"},
		{"time zone on an interval job", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    every: 1h",
			"    timezone: UTC",
		), 5, "timezone applies only to cron: schedules, not every", "agg"},
		{"jitter equal to every", lines(
			"jobs:",
			"  - name: certs",
			"    type: certrenew",
			"    every: 1h",
			"    jitter: 60m",
			"    options: {email: a@b.c, domains: [b.c]}",
		), 5, "jitter 1h must be less than every 1h", "certs"},
		{"jitter on a cron job", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '@daily'",
			"    jitter: 5m",
		), 5, "jitter applies only to every: schedules, not cron", "report"},
		{"every: 0", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    every: 0",
		), 4, "every must be more than 0", "agg"},
		{"every under a second", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    every: 1ns",
		), 4, "every 1ns is too short: the least is 1s", "agg"},
		{"jitter under a second", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    every: 1m",
			"    jitter: 500ms",
		), 5, "jitter 500ms is too short: 0 (none) or at least 1s", "agg"},
		{"coordination: database on an interval job", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    every: 1h",
			"    coordination: database",
		), 5, "coordination applies only to cron: schedules", "agg"},
		{"coordination: database on a non-singleton cron job", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    singleton: false",
			"    cron: '@daily'",
			"    coordination: database",
		), 6, "coordination applies only to singleton jobs", "report"},
		{"unknown coordination", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '@daily'",
			"    coordination: etcd",
		), 5, `coordination "etcd" must be leader or database`, "report"},
		{"catch_up policy not in the list", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '@daily'",
			"    catch_up: first",
		), 5, `catch_up "first" must be latest, all or none`, "report"},
		{"catch_up_window with catch_up: none", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '@daily'",
			"    catch_up: none",
			"    catch_up_window: 48h",
		), 6, "catch_up_window has no effect with catch_up: none", "report"},
		{"progress_timeout on a non-singleton", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    singleton: false",
			"    every: 1m",
			"    progress_timeout: 5m",
		), 6, "progress_timeout applies only to singleton jobs", "agg"},
		{"progress_timeout on a database-mode job", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '@daily'",
			"    coordination: database",
			"    progress_timeout: 5m",
		), 6, "progress_timeout applies only to coordination: leader", "report"},

		// Durations and other values.
		{"duration with a spelled-out unit", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    grace: 10 sec",
		), 5, `grace: "10 sec" is not a duration`, "agg"},
		{"duration without a unit", lines(
			"shutdown_timeout: 30",
		), 1, "shutdown_timeout: 30 needs a unit", ""},
		{"negative duration", lines(
			"etcd:",
			"  dial_timeout: -5s",
		), 2, "etcd.dial_timeout must not be negative", ""},
		{"negative grace", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    grace: -1s",
		), 5, "grace must not be negative", "agg"},
		{"negative catch_up_window", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '@daily'",
			"    catch_up_window: -24h",
		), 5, "catch_up_window must not be negative", "report"},
		{"a list where a duration goes", lines(
			"leadership:",
			"  ttl: [10s]",
		), 2, "leadership.ttl must be a duration such as 10s or 5m, not a list", ""},
		{"a string where a boolean goes", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: yes",
		), 4, "continuous must be true or false, not a string", "agg"},
		{"jobs not a list", lines(
			"jobs:",
			"  name: agg",
		), 2, "jobs must be a list of jobs", ""},
		{"log level", lines(
			"log: {level: verbose}",
		), 1, `log.level "verbose" must be debug, info, warn or error`, ""},
		{"log format", lines(
			"log: {format: logfmt}",
		), 1, `log.format "logfmt" must be auto, text or json`, ""},
		{"listen address without a port", lines(
			"http: {listen: 127.0.0.1}",
		), 1, `http.listen "127.0.0.1" must be host:port`, ""},
		{"instance name with a slash", lines(
			"instance: server/1",
		), 1, `instance "server/1": use letters, digits`, ""},

		// Leadership timing: TestLeadershipTimingProblemsAreReportedAtTheValueToBlame.

		// etcd and PostgreSQL secrets and files.
		{"url_env and url_file both set", lines(
			"postgres:",
			"  url_file: /etc/snip-jobs/database-url",
			"  url_env: DATABASE_URL",
		), 3, "postgres.url_file (line 2) and postgres.url_env are both set: choose one", ""},
		{"url_env not a variable name", lines(
			"postgres:",
			"  url_env: SNIP-JOBS-URL",
		), 2, "postgres.url_env must be the name of an environment variable", ""},
		{"url_file not an absolute path", lines(
			"postgres:",
			"  url_file: database-url",
		), 2, "postgres.url_file must be the absolute path of a file", ""},
		{"TLS cert without key", lines(
			"etcd:",
			"  endpoints: [https://10.0.0.1:2379]",
			"  tls:",
			"    cert: /etc/c.pem",
		), 4, "cert is set without key", ""},
		{"TLS key without cert", lines(
			"etcd:",
			"  endpoints: [https://10.0.0.1:2379]",
			"  tls: {key: /etc/k.pem}",
		), 3, "key is set without cert", ""},
		{"password_file and password_env both set", lines(
			"etcd:",
			"  endpoints: [https://10.0.0.1:2379]",
			"  auth:",
			"    user: snip",
			"    password_file: /etc/pw",
			"    password_env: ETCD_PASSWORD",
		), 6, "etcd.auth.password_file (line 5) and etcd.auth.password_env are both set", ""},
		{"etcd user without a password", lines(
			"etcd:",
			"  endpoints: [https://10.0.0.1:2379]",
			"  auth: {user: snip}",
		), 3, "etcd.auth.user is set without a password", ""},
		{"relative path", lines(
			"etcd:",
			"  endpoints: [https://10.0.0.1:2379]",
			"  tls: {ca: ca.pem}",
		), 3, `etcd.tls.ca "ca.pem" must be an absolute path`, ""},
		{"TLS for the embedded etcd", lines(
			"etcd:",
			"  tls: {ca: /etc/ca.pem}",
		), 2, "etcd.tls applies only to an external etcd cluster", ""},
		{"embedded_dir with endpoints", lines(
			"etcd:",
			"  endpoints: [https://10.0.0.1:2379]",
			"  embedded_dir: /var/lib/etcd",
		), 3, "etcd.embedded_dir applies only to the embedded etcd", ""},
		{"endpoint without a scheme", lines(
			"etcd:",
			"  endpoints:",
			"    - https://10.0.0.1:2379",
			"    - 10.0.0.2:2379",
		), 4, `etcd.endpoints: "10.0.0.2:2379" must be a URL`, ""},
		{"TLS with a plain-HTTP endpoint", lines(
			"etcd:",
			"  endpoints: [https://10.0.0.1:2379, http://10.0.0.2:2379]",
			"  tls: {ca: /etc/ca.pem}",
		), 2, `etcd.endpoints: "http://10.0.0.2:2379" is plain HTTP, so etcd.tls (line 3) would not be used: write https://`, ""},
		{"auth with a plain-HTTP endpoint", lines(
			"etcd:",
			"  endpoints:",
			"    - http://10.0.0.1:2379",
			"  auth: {user: snip, password_env: PW}",
		), 3, `is plain HTTP, so etcd.auth's password (line 4) would travel in clear text: write https://`, ""},
		{"an IP address in allowed_hosts", lines(
			"http:",
			"  allowed_hosts: [snip-1.internal, 10.0.0.5]",
		), 2, `http.allowed_hosts: "10.0.0.5" is an IP address, and IP addresses are always accepted`, ""},
		{"localhost in allowed_hosts", lines(
			"http:",
			"  allowed_hosts:",
			"    - localhost",
		), 3, `"localhost" is a loopback name, always accepted`, ""},
		{"a URL in allowed_hosts", lines(
			"http:",
			"  allowed_hosts: [snip-1.internal, 'https://snip-1.internal:9469']",
		), 2, `"https://snip-1.internal:9469" must be a host name such as snip-1.internal`, ""},
		{"a wildcard in allowed_hosts", lines(
			"http:",
			"  allowed_hosts: ['*.internal']",
		), 2, `must be a host name`, ""},
		{"endpoint listed twice", lines(
			"etcd:",
			"  endpoints:",
			"    - https://10.0.0.1:2379",
			"    - https://10.0.0.1:2379",
		), 4, "is listed twice (first at line 3)", ""},
		{"etcd prefix without a leading slash", lines(
			"etcd: {prefix: snip-jobs}",
		), 1, "must start with /", ""},

		// Options.
		{"option of the wrong type", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    options:",
			"      batch_size: lots",
		), 6, "options.batch_size must be a whole number, not a string", "agg"},
		{"a fraction where the option is a whole number (go-yaml would truncate it)", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    options:",
			"      batch_size: 1.5",
		), 6, "options.batch_size must be a whole number, not 1.5", "agg"},
		{"bad duration in an option", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    options:",
			"      flush_every: 10 sec",
		), 6, `options.flush_every: "10 sec" is not a duration`, "agg"},
		{"bad item in an option's list", lines(
			"jobs:",
			"  - name: certs",
			"    type: certrenew",
			"    every: 1h",
			"    options:",
			"      email: ops@example.com",
			"      domains: [a.example.com, {b: 1}]",
		), 7, "options.domains: an item must be a string, not a mapping", "certs"},
		{"a string where an option is a list", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '@daily'",
			"    options: {recipients: ops@example.com}",
		), 5, "options.recipients must be a list, not a string", "report"},
		{"a value go-yaml panics on is an error, not a crash", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '@daily'",
			"    options:",
			"      recipients: !!binary aGVsbG8=",
		), 6, "options.recipients: this value cannot be decoded", "report"},
		{"alias without anchor inside a job", lines(
			"jobs:",
			"  - name: report",
			"    type: weeklyreport",
			"    cron: '@daily'",
			"    options:",
			"      title: *missing",
		), 6, "alias *missing: no anchor &missing is defined before it", "report"},
		{"options not a mapping", lines(
			"jobs:",
			"  - name: agg",
			"    type: aggregator",
			"    continuous: true",
			"    options: [1, 2]",
		), 5, "options must be a mapping", "agg"},
		{"the options' Validate error, at the options", lines(
			"jobs:",
			"  - name: certs",
			"    type: certrenew",
			"    every: 1h",
			"    options:",
			"      domains: [snip.example.com]",
		), 6, "options: email is required", "certs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := problems(t, c.file)
			if len(errs) != 1 {
				t.Errorf("got %d problems, want only this one:%s", len(errs), dump(errs))
			}
			e := findProblem(errs, c.line, c.phrase)
			if e == nil {
				t.Fatalf("no problem at line %d containing %q; got:%s", c.line, c.phrase, dump(errs))
			}
			if e.Job != c.job {
				t.Errorf("problem names job %q, want %q: %s", e.Job, c.job, e)
			}
			if !strings.HasPrefix(e.Error(), "test.yaml:") {
				t.Errorf("problem does not start with the file name: %s", e)
			}
			if c.job != "" && !strings.Contains(e.Error(), `job "`+c.job+`"`) {
				t.Errorf("message does not name the job: %s", e)
			}
		})
	}
}

// A leadership timing problem is reported at the value to blame, as written:
// the TTL's own problems at the TTL, a margin not less than the TTL at the
// margin, too little room for two keep-alives at the renew interval, else at
// the margin that left too little room (a 0 is the default: not to blame).
func TestLeadershipTimingProblemsAreReportedAtTheValueToBlame(t *testing.T) {
	cases := []struct {
		name string
		file []byte
		want []string // every problem, as printed
	}{
		{"margin not less than TTL", lines(
			"instance: a",
			"leadership:",
			"  ttl: 5s",
			"  margin: 5s",
		), []string{"test.yaml:4:11: leadership: stop-early margin 5s must be less than the TTL 5s"}},
		{"margin not less than the default TTL", lines(
			"leadership:",
			"  margin: 10s",
		), []string{"test.yaml:2:11: leadership: stop-early margin 10s must be less than the TTL 10s"}},
		{"margin not less than TTL, in a flow mapping", lines(
			"leadership: {ttl: 4s, margin: 6s}",
		), []string{"test.yaml:1:31: leadership: stop-early margin 6s must be less than the TTL 4s"}},
		{"TTL below etcd's minimum", lines(
			"leadership:",
			"  ttl: 1s",
		), []string{"test.yaml:2:8: leadership: TTL 1s is below etcd's minimum lease TTL 2s"}},
		{"TTL below the Kubernetes backend's minimum, named so", lines(
			"leadership:",
			"  backend: kubernetes",
			"  ttl: 1s",
		), []string{"test.yaml:3:8: leadership: TTL 1s is below the Kubernetes backend's minimum lease TTL 2s"}},
		{"TTL not whole seconds", lines(
			"leadership:",
			"  ttl: 2500ms",
		), []string{"test.yaml:2:8: leadership: TTL 2.5s is not a whole number of seconds (etcd grants leases in whole seconds)"}},
		{"renew interval too long for two keep-alives", lines(
			"leadership:",
			"  ttl: 10s",
			"  margin: 3s",
			"  renew_interval: 4s",
		), []string{"test.yaml:4:19: leadership: renew interval 4s leaves room for fewer than two keep-alives before the deadline (TTL 10s − margin 3s = 7s); use less than 3.5s"}},
		{"margin leaves no room for two default keep-alives", lines(
			"leadership:",
			"  ttl: 10s",
			"  margin: 5s",
			"  renew_interval: 0", // the default, TTL/3
		), []string{"test.yaml:3:11: leadership: renew interval 3.333333333s leaves room for fewer than two keep-alives before the deadline (TTL 10s − margin 5s = 5s); use less than 2.5s"}},
		{"two problems, each at its value", lines(
			"leadership:",
			"  margin: 3s",
			"  ttl: 2500ms",
		), []string{
			"test.yaml:2:11: leadership: stop-early margin 3s must be less than the TTL 2.5s",
			"test.yaml:3:8: leadership: TTL 2.5s is not a whole number of seconds (etcd grants leases in whole seconds)",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := problems(t, c.file)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got:%s\nwant:\n%s", dump(errs), strings.Join(c.want, "\n"))
			}
		})
	}
}
