package certsync_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/jobs/certsync"
	"github.com/snip/snip-jobs/testbench/certtest"
)

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// noSecretLogged fails the test for each secret found in the job's log.
func (s *syncer) noSecretLogged(t *testing.T, secrets map[string]string) {
	t.Helper()
	log := s.logs.String()
	for what, v := range secrets {
		if strings.Contains(log, v) {
			t.Errorf("the log holds %s (%q):\n%s", what, v, log)
		}
	}
}

// readEnv parses the output of env(1).
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(readFile(t, path))), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	return env
}

// Not parallel: it sets the process's environment as the service's is set
// (the database URL, key_env's variable, the etcd password).
func TestTheReloadCommandSeesNoSecretOfTheServiceAndItsOutputIsLoggedOnlyOnFailure(t *testing.T) {
	r := certtest.Start(t, nil)
	want := issue(t, r, "shop.test")
	password, etcdPassword := "pw-"+randomHex(t), "etcd-"+randomHex(t)
	keys := strings.TrimSpace(string(readFile(t, r.KeyFile)))
	t.Setenv("SNIP_JOBS_DATABASE_URL", "postgres://snip_jobs:"+password+"@db.internal:5432/snip")
	t.Setenv("SNIP_TEST_CERTSYNC_KEYS", keys+"\n")
	t.Setenv("SNIP_ETCD_PASSWORD", etcdPassword)
	t.Setenv("LANG", "C.UTF-8")
	secrets := map[string]string{"the database password": password, "the sealing key": keys, "the etcd password": etcdPassword}

	dir := filepath.Join(t.TempDir(), "certs")
	base := t.TempDir()
	seen, fail, keyFile := filepath.Join(base, "env"), filepath.Join(base, "fail"), filepath.Join(base, "key-file")
	// It prints its environment (and keeps a copy), tries to read the
	// service's key file, and fails while fail exists.
	argv := []string{"/bin/sh", "-c", `/usr/bin/env > "$1"; /usr/bin/env
if cat "$3" >/dev/null 2>&1; then echo readable > "$4"; else echo refused > "$4"; fi
test ! -e "$2"`, "reload", seen, fail, r.KeyFile, keyFile}
	s := startSyncerOn(t, r, poolWithPassword(t, r, password), func(o *certsync.Options) {
		o.Dir, o.Reload, o.KeyFile, o.KeyEnv = dir, argv, "", "SNIP_TEST_CERTSYNC_KEYS"
	})
	s.waitFor(t, "a reload", func(st certsync.Status) bool { return fmtFiles(st.Files) == fmtFiles(want) && !st.ReloadPending })

	env := readEnv(t, seen)
	for name, value := range map[string]string{"PATH": os.Getenv("PATH"), "LANG": "C.UTF-8", "SNIP_CERTSYNC_DIR": dir, "SNIP_CERTSYNC_JOB": "cert-files"} {
		if env[name] != value {
			t.Errorf("the command's %s is %q, want %q", name, env[name], value)
		}
	}
	var extra []string
	for name := range env {
		if !slices.Contains([]string{"PATH", "LANG", "SNIP_CERTSYNC_DIR", "SNIP_CERTSYNC_JOB", "PWD"}, name) { // PWD: the shell's own
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		t.Errorf("the command's environment has %d more variables (%s); want only PATH, LANG, SNIP_CERTSYNC_DIR and SNIP_CERTSYNC_JOB",
			len(extra), strings.Join(extra, " "))
	}
	for what, v := range secrets {
		if strings.Contains(string(readFile(t, seen)), v) {
			t.Errorf("the command's environment holds %s", what)
		}
	}
	if got := strings.TrimSpace(string(readFile(t, keyFile))); got != "refused" {
		t.Errorf("the command's read of the service's key file: %s, want refused", got)
	}
	if !s.logged("reload command done") || s.logged("reload command done", "SNIP_CERTSYNC_DIR=") {
		t.Error("a successful reload: want it logged, without the command's output")
	}
	s.noSecretLogged(t, secrets)

	// A failure logs the output.
	if err := os.WriteFile(fail, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r.DueNow("shop.test")
	r.Pass()
	st := s.waitFor(t, "a failed reload", func(st certsync.Status) bool { return st.ReloadErr != nil })
	if !s.logged("the reload command failed", "SNIP_CERTSYNC_DIR="+dir, "exit status 1") {
		t.Errorf("a failed reload (%v): want its output logged", st.ReloadErr)
	}
	s.noSecretLogged(t, secrets)
}

func TestSecretsAReloadScriptTracesAreRedactedWhenItsOutputIsLogged(t *testing.T) {
	t.Parallel()
	r := certtest.Start(t, nil)
	issue(t, r, "shop.test")
	password := "pw-" + randomHex(t)
	base := t.TempDir()
	pwFile, seen, script := filepath.Join(base, "db-password"), filepath.Join(base, "seen"), filepath.Join(base, "reload.sh")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The keys from a copy: the service's own key file is unreadable to the
	// script (the other test); redaction is for a secret it finds anyway.
	keysCopy := filepath.Join(base, "keys-copy")
	if err := os.WriteFile(keysCopy, readFile(t, r.KeyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	// A script that traces itself: every secret it reads is printed.
	if err := os.WriteFile(script, []byte(`#!/bin/sh
set -x
keys=$(cat "$1")
password=$(cat "$2")
printf '%s\n' "$keys" "$password" > "$3"
PGPASSWORD="$password" /bin/true
/bin/echo "connecting to postgres://snip_jobs:$password@db.internal/snip"
/bin/cat "$4/shop.test.pem"
exit 3
`), 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "certs")
	argv := []string{script, keysCopy, pwFile, seen, dir}
	s := startSyncerOn(t, r, poolWithPassword(t, r, password), func(o *certsync.Options) { o.Dir, o.Reload = dir, argv })
	st := s.waitFor(t, "a failed reload", func(st certsync.Status) bool { return st.ReloadErr != nil })

	keys := strings.TrimSpace(string(readFile(t, r.KeyFile)))
	if got := string(readFile(t, seen)); got != keys+"\n"+password+"\n" {
		t.Fatalf("the script read %q; want the key and the password (the test proves nothing otherwise)", got)
	}
	secrets := map[string]string{"the database password": password, "the sealing key": keys}
	_, key, _ := strings.Cut(string(readFile(t, filepath.Join(dir, "shop.test.pem"))), "PRIVATE KEY-----\n")
	for i, line := range strings.Split(key, "\n") {
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			secrets["line "+string(rune('0'+i))+" of the private key"] = line
		}
	}
	if len(secrets) < 3 {
		t.Fatalf("no private key found in shop.test.pem")
	}
	if !s.logged("the reload command failed", "exit status 3", "+ keys=[REDACTED]", "postgres://[REDACTED]@db.internal", "BEGIN CERTIFICATE") {
		t.Errorf("a failed reload (%v): want its trace logged, redacted; the log:\n%s", st.ReloadErr, s.logs.String())
	}
	s.noSecretLogged(t, secrets)
	for what, v := range secrets {
		if strings.Contains(st.ReloadErr.Error(), v) {
			t.Errorf("the reload error holds %s", what)
		}
	}
}
