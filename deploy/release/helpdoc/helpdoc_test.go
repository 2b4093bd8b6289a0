package helpdoc_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snip/snip-jobs/deploy/release/helpdoc"
	"github.com/snip/snip-jobs/testbench/gobuild"
)

// snipJobs is the snip-jobs binary of this tree (gobuild.Shared: linked once
// for the checkout's test binaries) and its help, read.
func snipJobs(t *testing.T) (string, helpdoc.Doc) {
	t.Helper()
	dir, err := filepath.Abs("../../../cmd/snip-jobs")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := gobuild.Shared(context.Background(), dir, "snip-jobs")
	if err != nil {
		t.Fatal(err)
	}
	d, err := helpdoc.Read(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	return bin, d
}

// Read finds every command `help` lists, and in each command's --help its
// usage line, its description and as many flags as the listing has.
func TestReadFindsEveryCommandAndEveryFlag(t *testing.T) {
	t.Parallel()
	bin, d := snipJobs(t)
	if len(d.Commands) < 10 || d.Usage != "snip-jobs COMMAND [flags] [arguments]" || len(d.Intro) == 0 || len(d.Outro) == 0 {
		t.Fatalf("the top-level help read as %+v", d)
	}
	for _, c := range d.Commands {
		out, err := exec.Command(bin, c.Name, "--help").Output()
		if err != nil {
			t.Fatal(err)
		}
		listed := strings.Count(string(out), "\n  -")
		if !strings.HasPrefix(c.Usage, "snip-jobs "+c.Name) || len(c.About) == 0 || len(c.Flags) != listed {
			t.Errorf("%s: usage %q, %d paragraphs, %d flags read of %d listed", c.Name, c.Usage, len(c.About), len(c.Flags), listed)
		}
		for _, f := range c.Flags {
			if f.Name == "" || f.Text == "" || strings.ContainsAny(f.Name, " \t") {
				t.Errorf("%s: flag read as %+v", c.Name, f)
			}
		}
	}
}

// The man page renders without a warning from groff (man --warnings, as
// lintian runs it), and the rendered page has every command's usage line and
// every flag.
func TestTheManPageRendersWithoutWarningsAndHasEveryFlag(t *testing.T) {
	t.Parallel()
	man, err := exec.LookPath("man")
	if err != nil {
		t.Fatalf("man renders the page (Debian package man-db): %v", err)
	}
	_, d := snipJobs(t)
	page := filepath.Join(t.TempDir(), "snip-jobs.1")
	if err := os.WriteFile(page, d.Man("v0.0.0-test", time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(man, "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", page)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "MANWIDTH=80")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("man --warnings: %v\n%s", err, stderr.String())
	}
	cmd = exec.Command(man, "-l", page)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "MANWIDTH=250", "MAN_KEEP_FORMATTING=", "MANPAGER=cat")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	// Rendered: hyphens as the font has them, hyphenation off (.nh).
	text := strings.Join(strings.Fields(strings.NewReplacer("\u2010", "-", "\u2212", "-").Replace(string(out))), " ")
	for _, c := range d.Commands {
		if !strings.Contains(text, c.Usage) {
			t.Errorf("the man page has no %q", c.Usage)
		}
		for _, f := range c.Flags {
			if !strings.Contains(text, "--"+f.Name) {
				t.Errorf("the man page has no --%s of %s", f.Name, c.Name)
			}
		}
	}
}

// Bash completes the commands, a command's flags, files after --config,
// subcommands, and job names from the config's jobs list (those of the
// --config given, else $SNIP_JOBS_CONFIG's) where a command takes a JOB or
// after --job; nothing after a flag that takes another value.
func TestBashCompletesCommandsFlagsAndJobNames(t *testing.T) {
	t.Parallel()
	_, d := snipJobs(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "snip-jobs.bash")
	if err := os.WriteFile(script, d.BashCompletion("v0.0.0-test"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "snip-jobs.yaml")
	if err := os.WriteFile(cfg, []byte(`instance: a   # jobs: is not here
jobs:
  - name: aggregator
    type: aggregator
  - name: "weekly-report"   # quoted, with a comment
    type: weeklyreport
    options:
      - name: not-a-job
  - name: cert-renewer
log:
  - name: not-a-job-either
`), 0o644); err != nil {
		t.Fatal(err)
	}
	jobs := "aggregator weekly-report cert-renewer"
	cases := []struct{ words, want string }{
		{"snip-jobs ''", strings.Join(append(names(d), "help"), " ")},
		{"snip-jobs re", "resign resume reclaim report"},
		{"snip-jobs resign --config " + cfg + " ''", jobs},
		{"snip-jobs history w", "weekly-report"},
		{"snip-jobs status --", "--config --endpoints --interval --json --timeout --watch"},
		{"snip-jobs certs ''", "list retry renew"},
		{"snip-jobs report --job ''", jobs},
		{"snip-jobs pause --reason ''", ""},
		{"snip-jobs validate --config " + filepath.Join(dir, "snip-jobs.y"), cfg},
		{"snip-jobs help st", "status"},
	}
	for _, c := range cases {
		cmd := exec.Command("bash", "-c", `source "$1"; eval "COMP_WORDS=($2)"; COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _snip_jobs; echo "${COMPREPLY[*]}"`,
			"bash", script, c.words)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "SNIP_JOBS_CONFIG=" + cfg}
		out, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
			t.Errorf("completing %s: %q (%v), want %q", c.words, got, err, c.want)
		}
	}
}

func names(d helpdoc.Doc) []string {
	var out []string
	for _, c := range d.Commands {
		out = append(out, c.Name)
	}
	return out
}
