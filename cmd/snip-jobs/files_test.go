package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// namedFiles makes the files the tests name in configs: a regular file
// holding body with mode, a named pipe, and a sparse file of 1 GiB (nothing
// on disk; its size says 1 GiB).
type namedFiles struct {
	t   *testing.T
	dir string
}

func newNamedFiles(t *testing.T) namedFiles {
	t.Helper()
	dir := t.TempDir()
	return namedFiles{t: t, dir: dir}
}

func (n namedFiles) regular(name, body string, mode os.FileMode) string {
	n.t.Helper()
	p := filepath.Join(n.dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		n.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		n.t.Fatal(err)
	}
	return p
}

func (n namedFiles) fifo(name string) string {
	n.t.Helper()
	p := filepath.Join(n.dir, name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		n.t.Fatal(err)
	}
	return p
}

func (n namedFiles) huge(name string) string {
	n.t.Helper()
	p := n.regular(name, "", 0o600)
	if err := os.Truncate(p, 1<<30); err != nil {
		n.t.Fatal(err)
	}
	return p
}

// config writes text as a config file and returns its path.
func (n namedFiles) config(name string, text ...string) string {
	n.t.Helper()
	return n.regular(name, strings.Join(text, "\n")+"\n", 0o644)
}

// Every file the config names is checked by validate, not only the secrets:
// a CA bundle that is /dev/zero (run grew to 1.8 GB reading it and died) or
// a named pipe (run blocked on it), and certsync's key_file — the renewer's
// sealing keys — like the renewer's: readable by others, a named pipe, 1 GiB.
// Each is reported at the file:line:col of the option, with its job, and
// validate exits 2; it used to say ok.
func TestValidateRefusesTheFilesTheConfigNamesThatCannotBeReadSafely(t *testing.T) {
	t.Parallel()
	n := newNamedFiles(t)
	keys := n.regular("keys", "a2V5\n", 0o600)
	readable, fifo, huge, roots := n.regular("readable-keys", "a2V5\n", 0o644), n.fifo("keys-fifo"), n.huge("keys-huge"), n.fifo("roots.pem")
	path := n.config("files.yaml",
		"instance: server-1",
		"etcd:",
		"  endpoints: [https://10.0.0.1:2379]",
		"  tls: {ca: /dev/zero}", // 4:13
		"jobs:",
		"  - name: renewer",
		"    type: certrenew",
		"    every: 1h",
		"    options:",
		"      key_file: "+keys,
		"      ca_roots_file: "+roots, // 11:22
		"  - {name: sync-readable, type: certsync, singleton: false, continuous: true, options: {dir: /var/lib/a, key_file: "+readable+"}}",
		"  - {name: sync-fifo, type: certsync, singleton: false, continuous: true, options: {dir: /var/lib/b, key_file: "+fifo+"}}",
		"  - {name: sync-huge, type: certsync, singleton: false, continuous: true, options: {dir: /var/lib/c, key_file: "+huge+"}}",
	)
	r := snip(t, nil, "validate", "--config", path)
	col := len("  - {name: sync-xxxxxx, type: certsync, singleton: false, continuous: true, options: {dir: /var/lib/a, key_file: ") + 1
	for _, want := range []string{
		path + ":4:13: etcd.tls.ca /dev/zero is a character device, not a regular file: a certificate file must be one",
		path + `:11:22: job "renewer": options.ca_roots_file ` + roots + " is a named pipe, not a regular file: a certificate file must be one",
		path + ":12:" + strconv.Itoa(col+len("readable")-len("xxxxxx")) + `: job "sync-readable": options.key_file ` + readable + " is readable by its group and others (mode 0644)",
		path + ":13:" + strconv.Itoa(col+len("fifo")-len("xxxxxx")) + `: job "sync-fifo": options.key_file ` + fifo + " is a named pipe, not a regular file: a secret file must be one",
		path + ":14:" + strconv.Itoa(col+len("huge")-len("xxxxxx")) + `: job "sync-huge": options.key_file ` + huge + " holds 1073741824 bytes; a secret file may hold at most 65536 bytes",
	} {
		if r.code != 2 || len(linesWith(r.stderr, want)) != 1 {
			t.Errorf("exit %d, want 2 and a line starting %q; stderr:\n%s", r.code, want, r.stderr)
		}
	}
	if strings.Contains(r.stdout, "ok") {
		t.Errorf("validate says ok:\n%s", r.stdout)
	}
}

// run refuses a file the config names that is not a regular file before it
// reads it, at the setting's line, and exits: a CA bundle that is a named
// pipe used to block the start-up (deaf to the first SIGTERM), and so did a
// config file that is one (the process could only be killed).
func TestRunRefusesANamedPipeWhereAFileIsNamedInsteadOfBlockingOnIt(t *testing.T) {
	t.Parallel()
	n := newNamedFiles(t)
	ca := n.fifo("ca.pem")
	path := n.config("fifo-ca.yaml",
		"instance: server-1",
		"etcd:",
		"  endpoints: [https://127.0.0.1:1]",
		"  tls:",
		"    ca: "+ca, // 5:9
		"jobs:"+pulseJob,
	)
	r := snip(t, dbEnv("postgres://snip@127.0.0.1:1/snip"), "run", "--config", path)
	want := path + ":5:9: etcd.tls.ca " + ca + " is a named pipe, not a regular file: a certificate file must be one (it is not read)"
	if r.code != 1 || !strings.Contains(r.stderr, "\n"+want+"\n") {
		t.Errorf("run with a named pipe as etcd.tls.ca: exit %d, want 1 and %q in:\n%s", r.code, want, r.stderr)
	}

	config := n.fifo("config.yaml")
	r = snip(t, nil, "run", "--config", config)
	want = config + ": cannot read config file: config.yaml is not a regular file"
	if r.code != 2 || len(linesWith(r.stderr, want)) != 1 {
		t.Errorf("run with a named pipe as its config file: exit %d, want 2 and %q in:\n%s", r.code, want, r.stderr)
	}
}
