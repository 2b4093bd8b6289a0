package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestValidateReportsEveryProblemWithItsFileAndLineAndExits2(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	bad := strings.Join([]string{
		"instance: server-1",                  // 1
		"colour: blue",                        // 2: unknown key
		"leadership:",                         // 3
		"  ttl: 10 seconds",                   // 4: bad duration
		"jobs:",                               // 5
		"  - name: prune",                     // 6
		"    type: sql",                       // 7
		"    every: 1h",                       // 8
		"    options:",                        // 9
		"      resource: old rows",            // 10: statement missing, resource with a space
		"  - name: report",                    // 11
		"    type: weeklyreport-not-built-in", // 12: unknown type
		"    cron: \"0 8 * * MON\"",           // 13
	}, "\n") + "\n"
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	r := snip(t, nil, "validate", "--config", path)
	if r.code != 2 {
		t.Fatalf("exit %d, want 2\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing (problems go to stderr)", r.stdout)
	}
	for _, want := range []string{
		path + ":2:",
		path + ":4:",
		path + ":10:", // options of prune
		path + ":12:",
	} {
		if len(linesWith(r.stderr, want)) == 0 {
			t.Errorf("no problem reported at %s; stderr:\n%s", want, r.stderr)
		}
	}
	for _, want := range []string{"statement is required", `resource "old rows"`, `unknown job type "weeklyreport-not-built-in"`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	every := regexp.MustCompile(`^` + regexp.QuoteMeta(path) + `:\d+:\d+: `)
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if !every.MatchString(line) {
			t.Errorf("line %q does not start with file:line:col", line)
		}
	}
}

// The ten-deep alias bomb in a sql job's statement, which validate
// used to expand without limit (18 GB, killed after 309 s), is refused at the
// alias, with its file and line; so is what it would run.
func TestValidateRefusesAnAliasBombAtTheAlias(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("x-bomb:\n  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n") // lines 1, 2
	for i := 1; i <= 10; i++ {                                                             // lines 3–12
		b.WriteString("  - &a" + strconv.Itoa(i) + " [" + strings.TrimSuffix(strings.Repeat("*a"+strconv.Itoa(i-1)+", ", 10), ", ") + "]\n")
	}
	b.WriteString("jobs:\n  - name: prune\n    type: sql\n    every: 1h\n    options:\n      statement: *a10\n") // lines 13–18
	path := filepath.Join(t.TempDir(), "bomb.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := snip(t, nil, "validate", "--config", path)
	if r.code != 2 || !strings.Contains(r.stderr, path+":18:18: job \"prune\": alias *a10 would expand to more than 10000 YAML nodes") {
		t.Errorf("validate of the alias bomb: exit %d, want 2 and the problem at %s:18:18\n%s", r.code, path, r.stderr)
	}
}

// A file without jobs is valid (a server being set up) but says so: a
// truncated deploy looks the same.
func TestValidateWarnsOfAFileWithoutJobs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(path, []byte("instance: server-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := snip(t, nil, "validate", "--config", path)
	if r.code != 0 || !strings.Contains(r.stdout, "ok (instance server-1, 0 job(s))") {
		t.Fatalf("exit %d, stdout %q; want 0 and ok", r.code, r.stdout)
	}
	if want := path + ": warning: no jobs: this instance will run nothing"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}

func TestValidateAcceptsTheExampleConfig(t *testing.T) {
	t.Parallel()
	example := filepath.Join("..", "..", "configs", "snip-jobs.example.yaml")
	r := snip(t, nil, "validate", "--config", example)
	// The example names the job types of the three production jobs, which are
	// added to registry() separately. Until each is built in, the only problem
	// allowed is that one type being unknown; once all are, the file must pass.
	pending := map[string]bool{}
	for _, typ := range []string{"certrenew", "aggregator", "weeklyreport"} {
		if !slices.Contains(registry().Names(), typ) {
			pending[typ] = true
		}
	}
	if len(pending) == 0 {
		if r.code != 0 {
			t.Fatalf("exit %d, want 0\n%s", r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "ok") {
			t.Errorf("stdout %q, want an ok", r.stdout)
		}
		return
	}
	unknown := regexp.MustCompile(`: unknown job type "([a-z]+)"; known types: `)
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		m := unknown.FindStringSubmatch(line)
		if m == nil || !pending[m[1]] {
			t.Errorf("problem in the example config: %s", line)
		}
	}
	if r.code != 2 {
		t.Errorf("exit %d with job types %v not built in yet, want 2", r.code, pending)
	}

	// Everything else in the example (etcd, TLS, auth, timing, HTTP, log, and the
	// jobs' schedules) is checked with the built-in sql type in their place.
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for typ := range pending {
		text = strings.ReplaceAll(text, "type: "+typ, "type: sql")
	}
	text = regexp.MustCompile(`(?m)^    options:\n(?:      .*\n)+`).ReplaceAllString(text, "")
	text = strings.ReplaceAll(text, "    type: sql\n", "    type: sql\n    options:\n      statement: SELECT 1\n")
	copyPath := filepath.Join(t.TempDir(), "example.yaml")
	if err := os.WriteFile(copyPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	r = snip(t, nil, "validate", "--config", copyPath)
	if r.code != 0 {
		t.Fatalf("the example with sql jobs: exit %d, want 0\n%s", r.code, r.stderr)
	}
	r = snip(t, nil, "validate", "--config", copyPath, "--print")
	if r.code != 0 || !strings.Contains(r.stdout, "instance: server-1") || !strings.Contains(r.stdout, "password_file: /etc/snip-jobs/etcd-password") {
		t.Errorf("validate --print: exit %d, stdout:\n%s", r.code, r.stdout)
	}
}

func TestEveryCommandHasHelpThatNamesItsFlags(t *testing.T) {
	t.Parallel()
	for _, cmd := range commands() {
		fs := flagSet(cmd, &cli{})
		cmd.flags(fs, &cli{})
		var flags []string
		fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })
		if cmd.name != "version" && cmd.name != "dev" && !slices.Contains(flags, "config") {
			t.Errorf("%s has no --config flag", cmd.name)
		}
		for _, h := range []string{"--help", "-h"} {
			r := snip(t, nil, cmd.name, h)
			if r.code != 0 {
				t.Errorf("%s %s: exit %d, want 0\n%s", cmd.name, h, r.code, r.stderr)
			}
			if !strings.HasPrefix(r.stdout, "Usage: snip-jobs "+cmd.name) {
				t.Errorf("%s %s: stdout does not start with its usage line:\n%s", cmd.name, h, r.stdout)
			}
			for _, f := range flags {
				if !strings.Contains(r.stdout, "-"+f+" ") && !strings.Contains(r.stdout, "-"+f+"\n") {
					t.Errorf("%s %s does not name its flag -%s:\n%s", cmd.name, h, f, r.stdout)
				}
			}
		}
	}
	for _, h := range []string{"--help", "-h", "help"} {
		r := snip(t, nil, h)
		if r.code != 0 {
			t.Errorf("snip-jobs %s: exit %d, want 0", h, r.code)
		}
		for _, cmd := range commands() {
			if len(linesWith(r.stdout, "  "+cmd.name+" ", cmd.summary)) != 1 {
				t.Errorf("snip-jobs %s does not describe %s:\n%s", h, cmd.name, r.stdout)
			}
		}
	}
	if r := snip(t, nil, "help", "status"); r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: snip-jobs status") {
		t.Errorf("help status: exit %d\n%s", r.code, r.stdout)
	}
}

func TestUnknownCommandsAndFlagsPrintUsageOnStderrAndExit2(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"frobnicate"}, {"help", "frobnicate"}} {
		r := snip(t, nil, args...)
		if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "Usage:") {
			t.Errorf("snip-jobs %v: exit %d, stdout %q, stderr:\n%s; want usage on stderr and exit 2", args, r.code, r.stdout, r.stderr)
		}
	}
	r := snip(t, nil, "status", "--frobnicate")
	if r.code != 2 || !strings.Contains(r.stderr, "-frobnicate") || !strings.Contains(r.stderr, "snip-jobs status --help") {
		t.Errorf("status --frobnicate: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = snip(t, nil, "resign")
	if r.code != 2 || !strings.Contains(r.stderr, "exactly one argument") {
		t.Errorf("resign without a job: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// version names the Go version and, for each library it lists, the version
// go.mod selects (a build outside the release's says its commit is not
// recorded: the release build's stamp is tested in deploy/release/relbuild).
func TestVersionPrintsTheGoAndDependencyVersions(t *testing.T) {
	t.Parallel()
	r := snip(t, nil, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "snip-jobs ") {
		t.Fatalf("version: exit %d, stdout %q", r.code, r.stdout)
	}
	lines := strings.Split(r.stdout, "\n")
	if want := "go           " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH; !slices.Contains(lines, want) {
		t.Errorf("version does not say %q:\n%s", want, r.stdout)
	}
	for _, d := range dependencyVersions {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", d.module).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", d.module, err)
		}
		want := fmt.Sprintf("%-12s %s %s", d.label, d.module, strings.TrimSpace(string(out)))
		if !slices.Contains(lines, want) {
			t.Errorf("version does not say %q:\n%s", want, r.stdout)
		}
	}
}

func TestConfigComesFromTheEnvironmentWhenNotGiven(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "from-env.yaml")
	if err := os.WriteFile(path, []byte("instance: from-env\njobs: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := snip(t, []string{"SNIP_JOBS_CONFIG=" + path}, "validate")
	if r.code != 0 || !strings.Contains(r.stdout, path) {
		t.Fatalf("validate with SNIP_JOBS_CONFIG: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = snip(t, nil, "validate", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	if r.code != 2 || !strings.Contains(r.stderr, "config file not found") {
		t.Fatalf("validate of a missing file: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestRunWithoutADatabaseURLFailsAndSaysWhere(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, config{instance: "no-db", endpoints: []string{"http://127.0.0.1:1"}, adminPort: freePort(t), jobs: pulseJob})
	r := snip(t, nil, "run", "--config", path)
	if r.code != 1 || !strings.Contains(r.stderr, "SNIP_JOBS_DATABASE_URL") {
		t.Fatalf("run without the database URL: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// Each built-in type decodes its own options from the config's node: a bad
// option of any type is reported at its value's file:line:col, with the job.
func TestValidateReportsABadOptionOfEveryTypeAtItsLine(t *testing.T) {
	t.Parallel()
	cases := []struct{ typ, schedule, option, want string }{
		{"aggregator", "continuous: true", "batch_size: lots", `options.batch_size must be a whole number, not a string`},
		{"weeklyreport", `cron: "0 8 * * MON"`, "top: many", `options.top must be a whole number, not a string`},
		{"certrenew", "every: 1h", "concurrency: [1]", `options.concurrency must be a whole number, not a list`},
		{"certsync", "continuous: true", "reload_timeout: soon", `options.reload_timeout: "soon" is not a duration`},
		{"sql", "every: 1h", "statement: {a: 1}", `options.statement must be a string, not a mapping`},
		{"exec", "every: 1h", "command: [bin/backup]", `options.command: the program "bin/backup" must be an absolute path`},
	}
	var names []string
	for _, c := range cases {
		names = append(names, c.typ)
	}
	if got := registry().Names(); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
		t.Errorf("built-in types %v, this test covers %v: add a case", got, names)
	}
	for _, c := range cases {
		t.Run(c.typ, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.yaml")
			text := strings.Join([]string{
				"jobs:",              // 1
				"  - name: the-job",  // 2
				"    type: " + c.typ, // 3
				"    " + c.schedule,  // 4
				"    options:",       // 5
				"      " + c.option,  // 6
			}, "\n") + "\n"
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			r := snip(t, nil, "validate", "--config", path)
			col := strings.Index(c.option, ":") + 2 + len("      ") + 1
			want := path + ":6:" + strconv.Itoa(col) + `: job "the-job": ` + c.want
			if r.code != 2 || len(linesWith(r.stderr, want)) != 1 {
				t.Errorf("exit %d, want 2 and a line starting %q; stderr:\n%s", r.code, want, r.stderr)
			}
		})
	}
}

// validate says of the secret files what run will say at start: a file others
// may read is an error (exit 2) with run's words, or with
// --allow-readable-secrets a warning (exit 0); one they may write, or a named
// pipe, is an error either way.
func TestValidateSaysWhatRunSaysAboutSecretFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("postgres://snip@db/snip\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	readable, writable := secret("readable", 0o644), secret("writable", 0o602)
	config := func(urlFile string) string {
		p := filepath.Join(dir, filepath.Base(urlFile)+".yaml")
		if err := os.WriteFile(p, []byte("instance: server-1\npostgres: {url_file: "+urlFile+"}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	readableLine := "postgres.url_file " + readable + " is readable by its group and others (mode 0644): chmod go-rwx " + readable
	for _, c := range []struct {
		name     string
		urlFile  string
		allow    bool
		code     int
		inStderr []string
	}{
		{"readable", readable, false, 2, []string{"secret files must be readable by their owner only", readableLine,
			"start with --allow-readable-secrets to run with a warning for each instead"}},
		{"readable, allowed", readable, true, 0, []string{"warning: secret file readable by other users (allowed by --allow-readable-secrets): " + readableLine}},
		{"writable", writable, false, 2, []string{"postgres.url_file " + writable + " is writable by others (mode 0602), so anyone could have replaced it"}},
		{"writable, allowed", writable, true, 2, []string{"postgres.url_file " + writable + " is writable by others (mode 0602)", "never allows this"}},
		{"named pipe, allowed", fifo, true, 2, []string{"postgres.url_file " + fifo + " is a named pipe, not a regular file"}},
	} {
		args := []string{"validate", "--config", config(c.urlFile)}
		if c.allow {
			args = append(args, "--allow-readable-secrets")
		}
		r := snip(t, nil, args...)
		ok := r.code == c.code && strings.Contains(r.stdout, "ok (instance server-1") == (c.code == 0)
		for _, want := range c.inStderr {
			ok = ok && strings.Contains(r.stderr, want)
		}
		if !ok {
			t.Errorf("%s: exit %d, stdout %q, stderr:\n%s\nwant exit %d and in stderr: %q", c.name, r.code, r.stdout, r.stderr, c.code, c.inStderr)
		}
	}
}
