package configs_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/snip/snip-jobs/configs"
)

// Every file the config names is examined, not only secrets: a CA bundle or
// a certificate that is a device, a named pipe or larger than a certificate
// file may be (1 MiB) is a problem, reported at the file:line:col of the
// setting that names it, with its job; a certificate file anyone may read or
// write is none of the secret files' business.
func TestEveryFileTheConfigNamesIsExaminedWhereItIsNamed(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "cert.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "bundle.pem")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 1<<30); err != nil { // sparse: 1 GiB of nothing
		t.Fatal(err)
	}
	open := secretFile(t, "open.pem", "-----BEGIN CERTIFICATE-----\n", 0o666)
	key := secretFile(t, "key", "k\n", 0o600)
	f, err := configs.Parse("test.yaml", lines(
		"etcd:",
		"  endpoints: [https://10.0.0.1:2379]",
		"  tls: {ca: /dev/zero, cert: "+fifo+", key: "+key+"}",
		"jobs:",
		"  - name: truster",
		"    type: sealer",
		"    every: 1h",
		"    options:",
		"      key_file: "+key,
		"      ca_file: "+big,
		"  - {name: open, type: sealer, every: 1h, options: {ca_file: "+open+", key_file: "+key+"}}",
	), secretTypes{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range f.CheckFiles() {
		got = append(got, p.Line())
	}
	want := []string{
		"test.yaml:3:13: etcd.tls.ca /dev/zero is a character device, not a regular file: a certificate file must be one (it is not read)",
		"test.yaml:3:30: etcd.tls.cert " + fifo + " is a named pipe, not a regular file: a certificate file must be one (it is not read)",
		`test.yaml:10:16: job "truster": options.ca_file ` + big + " holds 1073741824 bytes; a certificate file may hold at most 1048576 bytes (it is not read)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("CheckFiles:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p := f.SettingPos("etcd.tls.key"); p.String() != "test.yaml:3:"+strconv.Itoa(len("  tls: {ca: /dev/zero, cert: ")+len(fifo)+len(", key: ")+1) {
		t.Errorf("SettingPos(etcd.tls.key) = %s", p)
	}
}

// A certificate file is read no further than a certificate file may hold,
// whatever its size says, and never if it is not a regular file: /dev/zero
// used to be read until the process ran out of memory, a named pipe until a
// writer came.
func TestACertificateFileIsReadOnlyIfRegularAndNoLargerThanOne(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ca := secretFile(t, "ca.pem", "-----BEGIN CERTIFICATE-----\n", 0o644)
	read := func(path string) error {
		_, err := configs.ReadFile(configs.NamedFile{Key: "etcd.tls.ca", Path: path, Holds: configs.Certificates})
		return err
	}
	if err := read(ca); err != nil {
		t.Errorf("a CA bundle anyone may read: %v", err)
	}
	for path, want := range map[string]string{
		"/dev/zero":      "etcd.tls.ca /dev/zero is a character device, not a regular file: a certificate file must be one (it is not read)",
		fifo:             "etcd.tls.ca " + fifo + " is a named pipe, not a regular file: a certificate file must be one (it is not read)",
		"/proc/kallsyms": "etcd.tls.ca /proc/kallsyms holds more than that; a certificate file may hold at most 1048576 bytes (it is not read)",
	} {
		if err := read(path); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}

// The paths a job's processes may not read: every secret file the config
// names (not its certificates), and systemd's credentials directory.
func TestTheSecretPathsAreTheSecretFilesAndTheCredentialsDirectory(t *testing.T) {
	f, err := configs.Parse("test.yaml", lines(
		"postgres: {url_file: /etc/snip-jobs/database-url}",
		"etcd:",
		"  endpoints: [https://10.0.0.1:2379]",
		"  tls: {ca: /etc/ssl/etcd-ca.pem, cert: /etc/ssl/etcd.pem, key: /etc/ssl/etcd.key}",
		"jobs:",
		"  - {name: sealer, type: sealer, every: 1h, options: {ca_file: /etc/ssl/ca.pem, key_file: /etc/snip-jobs/keys}}",
	), secretTypes{})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CREDENTIALS_DIRECTORY": "/run/credentials/snip-jobs.service"}
	got := f.SecretPaths(func(k string) string { return env[k] })
	want := []string{"/etc/snip-jobs/database-url", "/etc/ssl/etcd.key", "/etc/snip-jobs/keys", "/run/credentials/snip-jobs.service"}
	if !slices.Equal(got, want) {
		t.Errorf("SecretPaths = %q, want %q", got, want)
	}
	if got := f.SecretPaths(func(string) string { return "" }); len(got) != 3 {
		t.Errorf("without a credentials directory: %q", got)
	}
}
