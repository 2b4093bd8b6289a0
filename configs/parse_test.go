package configs_test

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/leadership"
	etcdlayout "github.com/snip/snip-jobs/leadership/etcdlease/layout"
)

func TestEveryProblemIsReportedAtOnceOnePerLineInFileOrder(t *testing.T) {
	file := lines(
		/* 1 */ "instance: server-1",
		/* 2 */ "etcd:",
		/* 3 */ "  endpoints: [https://10.0.0.1:2379]",
		/* 4 */ "  tls: {cert: /etc/snip-jobs/cert.pem}",
		/* 5 */ "postgres:",
		/* 6 */ "  url_env: SNIP_JOBS_DATABASE_URL",
		/* 7 */ "  url_file: /etc/snip-jobs/database-url",
		/* 8 */ "leadership: {ttl: 10s, margin: 10s}",
		/* 9 */ "log: {levle: debug}",
		/* 10 */ "jobs:",
		/* 11 */ "  - name: cert-renewer",
		/* 12 */ "    type: certrenewer",
		/* 13 */ "    every: 1h",
		/* 14 */ "    jitter: 2h",
		/* 15 */ "    options: {whatever: 1}",
		/* 16 */ "  - name: aggregator",
		/* 17 */ "    type: aggregator",
		/* 18 */ "    continuous: true",
		/* 19 */ "    options:",
		/* 20 */ "      batch_size: big",
		/* 21 */ "      flush: 5s",
		/* 22 */ "      batch: 3",
		/* 23 */ "  - name: weekly-report",
		/* 24 */ "    type: weeklyreport",
		/* 25 */ `    cron: "0 8 * * MON"`,
		/* 26 */ "    timezone: Paris",
		/* 27 */ "    catch_up: everything",
		/* 28 */ "  - name: aggregator",
		/* 29 */ "    type: aggregator",
		/* 30 */ "    every: 10 minutes",
	)
	want := strings.Join([]string{
		`test.yaml:4:9: etcd.tls: cert is set without key; a client certificate needs both`,
		`test.yaml:7:3: postgres.url_env (line 6) and postgres.url_file are both set: choose one`,
		`test.yaml:8:32: leadership: stop-early margin 10s must be less than the TTL 10s`,
		`test.yaml:9:7: unknown key "levle" in log (did you mean "level"?)`,
		`test.yaml:12:11: job "cert-renewer": unknown job type "certrenewer"; known types: aggregator, certrenew, weeklyreport`,
		`test.yaml:14:13: job "cert-renewer": jitter 2h must be less than every 1h`,
		`test.yaml:20:19: job "aggregator": options.batch_size must be a whole number, not a string`,
		`test.yaml:21:7: job "aggregator": unknown key "flush" in options`,
		`test.yaml:22:7: job "aggregator": unknown key "batch" in options`,
		`test.yaml:26:15: job "weekly-report": timezone "Paris" is not a known time zone: use an IANA name such as Europe/Paris, or UTC`,
		`test.yaml:27:15: job "weekly-report": catch_up "everything" must be latest, all or none`,
		`test.yaml:28:11: job "aggregator": job name "aggregator" is already used by the job at line 16`,
		`test.yaml:30:12: job "aggregator": every: "10 minutes" is not a duration (write e.g. 10s, 5m, 1h30m; units ms, s, m, h)`,
	}, "\n")
	errs := problems(t, file)
	if got := errs.Error(); got != want {
		t.Errorf("got:\n%s\n\nwant:\n%s", got, want)
	}
}

func TestErrorsPrintsSortedByPositionWhateverTheOrder(t *testing.T) {
	errs := configs.Errors{
		{Pos: configs.Pos{File: "a.yaml", Line: 9, Col: 1}, Msg: "third"},
		{Pos: configs.Pos{File: "a.yaml", Line: 2, Col: 5}, Job: "x", Msg: "second"},
		{Pos: configs.Pos{File: "a.yaml", Line: 2, Col: 1}, Msg: "first"},
	}
	want := "a.yaml:2:1: first\na.yaml:2:5: job \"x\": second\na.yaml:9:1: third"
	if got := errs.Error(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestPosStringLeavesOutWhatIsUnknown(t *testing.T) {
	for _, c := range []struct {
		pos  configs.Pos
		want string
	}{
		{configs.Pos{File: "f.yaml", Line: 3, Col: 7}, "f.yaml:3:7"},
		{configs.Pos{File: "f.yaml", Line: 3}, "f.yaml:3"},
		{configs.Pos{File: "f.yaml"}, "f.yaml"},
		{configs.Pos{Line: 3, Col: 7}, "3:7"},
	} {
		if got := c.pos.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.pos, got, c.want)
		}
	}
}

func TestAnUnknownTypeStillLetsTheRestOfTheFileBeChecked(t *testing.T) {
	errs := problems(t, lines(
		"jobs:",
		"  - name: mystery",
		"    type: teleport",
		"    every: 1h",
		"    jitter: 3h",
		"    options: {anything: goes}",
		"    colour: blue",
		"  - name: agg",
		"    type: aggregator",
		"    continuous: true",
		"    options: {batch_size: many}",
	))
	for _, want := range []struct {
		line   int
		phrase string
	}{
		{3, `unknown job type "teleport"; known types: aggregator, certrenew, weeklyreport`},
		{5, "jitter 3h must be less than every 1h"},
		{7, `unknown key "colour"`},
		{11, "options.batch_size must be a whole number"},
	} {
		if findProblem(errs, want.line, want.phrase) == nil {
			t.Errorf("no problem at line %d containing %q; got:%s", want.line, want.phrase, dump(errs))
		}
	}
	if len(errs) != 4 {
		t.Errorf("got %d problems, want 4 (the unknown type's options are not checked):%s", len(errs), dump(errs))
	}
}

func TestDefaults(t *testing.T) {
	f := mustParse(t, lines(
		"instance: server-1",
		"jobs:",
		"  - name: agg",
		"    type: aggregator",
		"    every: 1m",
		"  - name: report",
		"    type: weeklyreport",
		"    cron: '@weekly'",
	))
	ttl, margin, renew := leadership.TimingDefaults(etcdlayout.Rules, 0, 0, 0)
	wantTop := configs.File{
		Path:     "test.yaml",
		Instance: "server-1",
		Etcd: configs.Etcd{
			EmbeddedDir: "/var/lib/snip-jobs/etcd",
			Prefix:      "/snip-jobs",
			DialTimeout: 5 * time.Second,
		},
		Postgres:        configs.Postgres{URLEnv: "SNIP_JOBS_DATABASE_URL"},
		Leadership:      configs.Leadership{Backend: configs.BackendEtcd, TTL: ttl, Margin: margin, RenewInterval: renew},
		Kubernetes:      configs.Kubernetes{Prefix: "snip-jobs"},
		HTTP:            configs.HTTP{Listen: "127.0.0.1:9469"},
		Log:             configs.Log{Format: configs.LogAuto, Level: slog.LevelInfo},
		ShutdownTimeout: 15 * time.Second,
	}
	gotTop := *f
	gotTop.Jobs = nil
	if !reflect.DeepEqual(gotTop, wantTop) {
		t.Errorf("got  %+v\nwant %+v", gotTop, wantTop)
	}
	if !f.Etcd.Embedded() {
		t.Errorf("no endpoints: Embedded() = false, want true")
	}

	agg := f.Jobs[0]
	if !agg.Singleton || agg.Grace != 10*time.Second || agg.ProgressTimeout != 0 {
		t.Errorf("job defaults: singleton %v grace %v progress_timeout %v; want true, 10s, 0", agg.Singleton, agg.Grace, agg.ProgressTimeout)
	}
	if got, want := decoded(t, agg, newAggregatorOptions), (&aggregatorOptions{BatchSize: 1000}); !reflect.DeepEqual(got, want) {
		t.Errorf("options without an options key: got %#v, want the type's defaults %#v", got, want)
	}
	if agg.Pos != (configs.Pos{File: "test.yaml", Line: 3, Col: 5}) {
		t.Errorf("job Pos = %v, want test.yaml:3:5", agg.Pos)
	}

	s := f.Jobs[1].Schedule
	if s.Location != time.UTC || s.Coordination != configs.Leader || s.CatchUp != configs.Latest || s.CatchUpWindow != 24*time.Hour {
		t.Errorf("cron defaults: %v %v %v %v; want UTC, leader, latest, 24h", s.Location, s.Coordination, s.CatchUp, s.CatchUpWindow)
	}
}

func TestZeroMeansDefaultWhereThereIsOne(t *testing.T) {
	f := mustParse(t, lines(
		"instance: server-1",
		"etcd: {dial_timeout: 0}",
		"leadership: {ttl: 0, margin: 0, renew_interval: 0s}",
		"shutdown_timeout: 0",
		"jobs:",
		"  - {name: agg, type: aggregator, continuous: true, grace: 0, progress_timeout: 0}",
	))
	if f.Etcd.DialTimeout != configs.DefaultEtcdDialTimeout || f.ShutdownTimeout != configs.DefaultShutdownTimeout ||
		f.Leadership.TTL != leadership.DefaultTTL || f.Jobs[0].Grace != configs.DefaultGrace || f.Jobs[0].ProgressTimeout != 0 {
		t.Errorf("zeros did not become defaults: %+v", f)
	}
}

func TestInstanceDefaultsToTheHostName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, lines("jobs: []"))
	if f.Instance != host {
		t.Errorf("Instance = %q, want the host name %q", f.Instance, host)
	}
}

func TestAnEmptyFileOrJobListIsAllowed(t *testing.T) {
	for _, data := range [][]byte{nil, lines("# nothing yet"), lines("instance: a", "jobs:"), lines("instance: a", "jobs: []")} {
		f := mustParse(t, data)
		if len(f.Jobs) != 0 {
			t.Errorf("%q: got %d jobs, want 0", data, len(f.Jobs))
		}
	}
}

func TestEverySetting(t *testing.T) {
	f := mustParse(t, lines(
		"instance: server-2",
		"etcd:",
		"  endpoints: [https://10.0.0.1:2379, HTTPS://10.0.0.2:2379/]",
		"  prefix: /jobs/",
		"  dial_timeout: 2s",
		"  tls: {ca: /ca.pem, cert: /c.pem, key: /k.pem}",
		"  auth: {user: snip, password_env: ETCD_PW}",
		"postgres: {url_file: /etc/db-url, migrate_on_start: true}",
		"leadership: {ttl: 6s, margin: 2s, renew_interval: 1s}",
		"http: {listen: ':0', allowed_hosts: [Snip-1.Internal., jobs.example.com]}",
		"log: {format: json, level: debug}",
		"shutdown_timeout: 1m",
		"jobs:",
		"  - name: certs",
		"    type: certrenew",
		"    singleton: true",
		"    every: 12h",
		"    jitter: 30m",
		"    grace: 1m",
		"    progress_timeout: 15m",
		"    options: {email: a@example.com, domains: [example.com]}",
		"  - name: report",
		"    type: weeklyreport",
		"    cron: 0 8 * * MON",
		"    timezone: Europe/Paris",
		"    coordination: database",
		"    catch_up: all",
		"    catch_up_window: 336h",
		"  - name: agg-everywhere",
		"    type: aggregator",
		"    singleton: false",
		"    continuous: true",
	))
	want := configs.Etcd{
		Endpoints:   []string{"https://10.0.0.1:2379", "HTTPS://10.0.0.2:2379/"},
		EmbeddedDir: configs.DefaultEtcdEmbeddedDir,
		Prefix:      "/jobs",
		DialTimeout: 2 * time.Second,
		TLS:         configs.TLS{CA: "/ca.pem", Cert: "/c.pem", Key: "/k.pem"},
		Auth:        configs.Auth{User: "snip", PasswordEnv: "ETCD_PW"},
	}
	if !reflect.DeepEqual(f.Etcd, want) {
		t.Errorf("etcd: got %+v, want %+v", f.Etcd, want)
	}
	if f.Postgres != (configs.Postgres{URLFile: "/etc/db-url", MigrateOnStart: true}) {
		t.Errorf("postgres: got %+v", f.Postgres)
	}
	if f.Leadership != (configs.Leadership{Backend: configs.BackendEtcd, TTL: 6 * time.Second, Margin: 2 * time.Second, RenewInterval: time.Second}) {
		t.Errorf("leadership: got %+v", f.Leadership)
	}
	if f.HTTP.Listen != ":0" || !reflect.DeepEqual(f.HTTP.AllowedHosts, []string{"snip-1.internal", "jobs.example.com"}) || f.Log != (configs.Log{Format: configs.LogJSON, Level: slog.LevelDebug}) || f.ShutdownTimeout != time.Minute {
		t.Errorf("http/log/shutdown: got %+v %+v %v", f.HTTP, f.Log, f.ShutdownTimeout)
	}

	certs := f.Jobs[0]
	if certs.Schedule.Kind != configs.Interval || certs.Schedule.Every != 12*time.Hour || certs.Schedule.Jitter != 30*time.Minute ||
		certs.Grace != time.Minute || certs.ProgressTimeout != 15*time.Minute {
		t.Errorf("certs: got %+v", certs)
	}
	if got := decoded(t, certs, newCertOptions); got.Email != "a@example.com" || !reflect.DeepEqual(got.Domains, []string{"example.com"}) {
		t.Errorf("certs options: got %+v", got)
	}
	report := f.Jobs[1].Schedule
	if report.Kind != configs.Cron || report.Cron != "0 8 * * MON" || report.Coordination != configs.Database ||
		report.CatchUp != configs.All || report.CatchUpWindow != 336*time.Hour {
		t.Errorf("report: got %+v", report)
	}
	agg := f.Jobs[2]
	if agg.Singleton || agg.Schedule.Kind != configs.Continuous || agg.Schedule.Location != nil {
		t.Errorf("agg: got %+v", agg)
	}
}

func TestACronScheduleFiresInItsTimeZone(t *testing.T) {
	f := mustParse(t, lines(
		"jobs:",
		"  - name: report",
		"    type: weeklyreport",
		`    cron: "0 8 * * MON"`,
		"    timezone: Europe/Paris",
	))
	// Whatever zone the caller's time is in, 08:00 is Paris time.
	from := time.Date(2026, 3, 25, 12, 0, 0, 0, time.UTC) // a Wednesday, before the switch to summer time
	next := f.Jobs[0].Schedule.Spec.Next(from)
	if want := time.Date(2026, 3, 30, 6, 0, 0, 0, time.UTC); !next.Equal(want) { // 08:00 CEST = 06:00 UTC
		t.Errorf("next run after %v = %v, want %v", from, next.UTC(), want)
	}
}

func TestCronDescriptorsAreAccepted(t *testing.T) {
	for _, spec := range []string{"@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually"} {
		f := mustParse(t, lines("jobs:", "  - {name: r, type: weeklyreport, cron: '"+spec+"'}"))
		if f.Jobs[0].Schedule.Spec == nil {
			t.Errorf("%s: no parsed schedule", spec)
		}
	}
}

func TestOptionsAreDecodedStrictlyAndEveryBadKeyIsReported(t *testing.T) {
	errs := problems(t, lines(
		"jobs:",
		"  - name: report",
		"    type: weeklyreport",
		"    cron: '@weekly'",
		"    options:",
		"      recipient: [ops@example.com]",
		"      titel: Clicks",
		"      title: [not, a, string]",
		"      colour: blue",
	))
	for _, want := range []struct {
		line   int
		phrase string
	}{
		{6, `unknown key "recipient" in options (did you mean "recipients"?)`},
		{7, `unknown key "titel" in options (did you mean "title"?)`},
		{8, "options.title must be a string, not a list"},
		{9, `unknown key "colour" in options`},
	} {
		e := findProblem(errs, want.line, want.phrase)
		if e == nil {
			t.Errorf("no problem at line %d containing %q; got:%s", want.line, want.phrase, dump(errs))
		} else if e.Job != "report" {
			t.Errorf("problem does not name the job: %s", e)
		}
	}
	if len(errs) != 4 {
		t.Errorf("got %d problems, want 4:%s", len(errs), dump(errs))
	}
}

func TestOptionsKeepTheTypesDefaults(t *testing.T) {
	f := mustParse(t, lines(
		"jobs:",
		"  - name: report",
		"    type: weeklyreport",
		"    cron: '@weekly'",
		"    options: {recipients: [ops@example.com]}",
	))
	want := &reportOptions{Recipients: []string{"ops@example.com"}, Title: "Weekly clicks"}
	if got := decoded(t, f.Jobs[0], newReportOptions); !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
}

func TestEveryProblemFromTheOptionsValidateIsReported(t *testing.T) {
	errs := problems(t, lines(
		"jobs:",
		"  - name: certs",
		"    type: certrenew",
		"    every: 1h",
	))
	for _, phrase := range []string{"options: email is required", "options: at least one domain is required"} {
		if findProblem(errs, 2, phrase) == nil {
			t.Errorf("no problem at the job's line containing %q; got:%s", phrase, dump(errs))
		}
	}
}

// A problem Validate says is about one option is reported at that option's
// value; the others at options:.
func TestAnOptionErrorIsReportedAtTheOptionsValue(t *testing.T) {
	errs := problems(t, lines(
		"jobs:",
		"  - name: agg",
		"    type: aggregator",
		"    continuous: true",
		"    options:",
		"      flush_every: 1s",
		"      batch_size: -5",
	))
	if e := findProblem(errs, 7, "options.batch_size: -5 is negative"); e == nil || e.Pos.Col != 19 || e.Job != "agg" {
		t.Errorf("want the option's problem at 7:19 in job agg; got:%s", dump(errs))
	}
	if findProblem(errs, 6, "options: something about the whole") == nil {
		t.Errorf("want the other problem at options: (line 6); got:%s", dump(errs))
	}
}

// noOptionTypes has one type that takes no options.
type noOptionTypes struct{}

func (noOptionTypes) Options(jobType string) (configs.OptionsType, bool) {
	return nil, jobType == "heartbeat"
}
func (noOptionTypes) Names() []string { return []string{"heartbeat"} }

func TestATypeWithoutOptionsRejectsThem(t *testing.T) {
	_, err := configs.Parse("test.yaml", lines(
		"jobs:",
		"  - name: beat",
		"    type: heartbeat",
		"    every: 1m",
		"    options: {loud: true}",
	), noOptionTypes{})
	if err == nil || !strings.Contains(err.Error(), `test.yaml:5:5: job "beat": job type "heartbeat" takes no options`) {
		t.Errorf("got %v", err)
	}
}

func TestAnchorsAliasesAndMergeKeysWork(t *testing.T) {
	f := mustParse(t, lines(
		"jobs:",
		"  - &certs",
		"    name: certs-a",
		"    type: certrenew",
		"    every: 1h",
		"    options: &acme {email: a@example.com, domains: [a.example.com]}",
		"  - <<: *certs",
		"    name: certs-b",
		"    options:",
		"      <<: *acme",
		"      domains: [b.example.com]",
		"  - <<: *certs",
		"    name: certs-c",
		"    options: *acme",
	))
	if len(f.Jobs) != 3 {
		t.Fatalf("got %d jobs, want 3", len(f.Jobs))
	}
	b := f.Jobs[1]
	if b.Type != "certrenew" || b.Schedule.Every != time.Hour {
		t.Errorf("merged job: got %+v", b)
	}
	if got := decoded(t, b, newCertOptions); got.Email != "a@example.com" || !reflect.DeepEqual(got.Domains, []string{"b.example.com"}) {
		t.Errorf("merged options: got %+v", got)
	}
	if got := decoded(t, f.Jobs[2], newCertOptions); !reflect.DeepEqual(got.Domains, []string{"a.example.com"}) {
		t.Errorf("aliased options: got %+v", got)
	}
}

func TestLoadNamesAMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snip-jobs.yaml")
	_, err := configs.Load(path, fakeTypes{})
	if err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(err, fs.ErrNotExist) = false for %v", err)
	}
	if want := path + ": config file not found"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %q, want it to start with %q", err, want)
	}
}

func TestLoadPutsThePathInPositions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snip-jobs.yaml")
	if err := os.WriteFile(path, lines("instance: a", "bogus: 1"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := configs.Load(path, fakeTypes{})
	if want := path + `:2:1: unknown key "bogus"`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}
