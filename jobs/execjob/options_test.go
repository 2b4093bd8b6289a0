package execjob_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/configs"
	"github.com/snip/snip-jobs/jobs/execjob"
	"github.com/snip/snip-jobs/scheduler"
)

func registry(t *testing.T) *scheduler.Registry {
	t.Helper()
	reg, err := scheduler.NewRegistry(execjob.Type())
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// Bad input is refused when the config is loaded (what validate runs), each
// problem at its option's file:line:col with the job's name: a program that
// is not there, not executable or not an absolute path; a variable that is
// the contract's, or no variable name; a working directory that is no
// directory; a timeout of 0 or below kill_grace; a kill_grace not below the
// job's grace.
func TestBadOptionsAreRefusedAtTheirFileLineAndColumn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ yaml, want string }{
		{"command: [" + filepath.Join(dir, "missing") + "]", `options.command: the program: stat ` + filepath.Join(dir, "missing") + `: no such file`},
		{"command: [" + notExec + "]", "options.command: the program " + notExec + " is not executable (mode 0644)"},
		{"command: [bin/backup]", `options.command: the program "bin/backup" must be an absolute path`},
		{"command: [" + dir + "]", "options.command: the program " + dir + " is not a regular file"},
		{"command: []", "options.command: is required"},
		{"command: [/bin/true]\n      env: {SNIP_JOBS_TOKEN: '7'}", "options.env: SNIP_JOBS_TOKEN: the SNIP_JOBS_ variables are the contract's"},
		{"command: [/bin/true]\n      env: {'1x': a}", `options.env: "1x" is not a variable name`},
		{"command: [/bin/true]\n      dir: " + file, "options.dir: " + file + " is not a directory"},
		{"command: [/bin/true]\n      dir: tmp", `options.dir: "tmp" must be an absolute path`},
		{"command: [/bin/true]\n      timeout: 0s", "options.timeout: 0s must be above kill_grace (5s)"},
		{"command: [/bin/true]\n      timeout: 3s", "options.timeout: 3s must be above kill_grace (5s)"},
		{"command: [/bin/true]\n      kill_grace: 10s", "options.kill_grace: 10s must be below the job's grace (10s)"},
	}
	for _, c := range cases {
		_, err := configs.Parse("snip-jobs.yaml", []byte(`instance: server-1
jobs:
  - name: backup
    type: exec
    every: 1h
    options:
      `+c.yaml+"\n"), registry(t))
		if err == nil {
			t.Errorf("%s: accepted", c.yaml)
			continue
		}
		msg, line := err.Error(), 7+strings.Count(c.yaml, "\n") // the bad option is the last line
		if !strings.Contains(msg, c.want) || !strings.HasPrefix(msg, fmt.Sprintf("snip-jobs.yaml:%d:", line)) || !strings.Contains(msg, `job "backup": `) {
			t.Errorf("%s:\n%s\nwant %q at line %d (the option's), naming the job", c.yaml, msg, c.want, line)
		}
	}
	if _, err := configs.Parse("snip-jobs.yaml", []byte(`instance: server-1
jobs:
  - name: backup
    type: exec
    every: 1h
    options:
      command: [/bin/sh, -c, 'echo hello']
      env: {BACKUP_TARGET: s3}
      timeout: 1m
`), registry(t)); err != nil {
		t.Errorf("good options refused: %v", err)
	}
}
