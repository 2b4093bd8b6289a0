package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/app/service"
)

// The units in deploy/systemd are what operators install: systemd-analyze
// verify accepts them (with ExecStart pointed at this build), and every
// socket they pass carries a name run takes.
func TestTheSystemdUnitsVerifyAndPassOnlySocketsRunTakes(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is needed to check deploy/systemd (Debian package systemd; .ci/run installs it): %v", err)
	}
	src := filepath.Join("..", "..", "deploy", "systemd")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var units []string
	fdName := regexp.MustCompile(`(?m)^FileDescriptorName=(.*)$`)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(b), "/usr/bin/snip-jobs", binary)
		if strings.HasSuffix(e.Name(), ".socket") {
			m := fdName.FindStringSubmatch(text)
			if m == nil {
				t.Errorf("%s has no FileDescriptorName= (run would refuse the socket)", e.Name())
			} else if !slices.Contains(service.SocketNames(registry()), m[1]) {
				t.Errorf("%s: FileDescriptorName=%s, which run refuses", e.Name(), m[1])
			}
		}
		path := filepath.Join(dir, e.Name())
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, path)
	}
	if service, err := os.ReadFile(filepath.Join(src, "snip-jobs.service")); err != nil {
		t.Error(err)
	} else if !regexp.MustCompile(`(?m)^ExecStopPost=-/usr/bin/snip-jobs reclaim$`).Match(service) {
		t.Error("snip-jobs.service does not run `snip-jobs reclaim` after the main process exits (ExecStopPost=): a killed leader's jobs would wait out its lease")
	}
	if len(units) < 2 {
		t.Fatalf("deploy/systemd has %d units, want the service and its socket", len(units))
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, units...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
