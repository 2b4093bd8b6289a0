package configs_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/snip/snip-jobs/configs"
)

const secretURL = "postgres://snip:hunter2@db.internal/snip"

func TestDatabaseURLFromTheEnvironment(t *testing.T) {
	t.Setenv("SNIP_JOBS_DATABASE_URL", "  "+secretURL+"\n")
	f := mustParse(t, lines("instance: a"))
	got, err := f.DatabaseURL()
	if err != nil || got != secretURL {
		t.Errorf("DatabaseURL() = %q, %v; want the variable's value, trimmed", got, err)
	}
}

func TestDatabaseURLFromAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "database-url")
	if err := os.WriteFile(path, []byte(secretURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := mustParse(t, lines("instance: a", "postgres: {url_file: "+path+"}"))
	got, err := f.DatabaseURL()
	if err != nil || got != secretURL {
		t.Errorf("DatabaseURL() = %q, %v; want the file's content, trimmed", got, err)
	}
}

func TestMissingSecretsSayWhereTheyWereLookedFor(t *testing.T) {
	dir := t.TempDir()
	blank := filepath.Join(dir, "blank")
	if err := os.WriteFile(blank, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	t.Setenv("SNIP_EMPTY", "")

	for _, c := range []struct {
		name string
		file []byte
		read func(*configs.File) (string, error)
		want string
	}{
		{"unset variable", lines("postgres: {url_env: SNIP_UNSET_FOR_TEST}"),
			(*configs.File).DatabaseURL, "environment variable SNIP_UNSET_FOR_TEST (postgres.url_env) is not set"},
		{"empty variable", lines("postgres: {url_env: SNIP_EMPTY}"),
			(*configs.File).DatabaseURL, "environment variable SNIP_EMPTY (postgres.url_env) is empty"},
		{"blank file", lines("postgres: {url_file: " + blank + "}"),
			(*configs.File).DatabaseURL, "postgres.url_file " + blank + " is empty"},
		{"missing file", lines("postgres: {url_file: " + missing + "}"),
			(*configs.File).DatabaseURL, "cannot read postgres.url_file " + missing + ": no such file or directory"},
		{"etcd password file missing", lines(
			"etcd:",
			"  endpoints: [https://10.0.0.1:2379]",
			"  auth: {user: snip, password_file: "+missing+"}"),
			(*configs.File).EtcdPassword, "cannot read etcd.auth.password_file " + missing},
		{"etcd password variable unset", lines(
			"etcd:",
			"  endpoints: [https://10.0.0.1:2379]",
			"  auth: {user: snip, password_env: SNIP_UNSET_FOR_TEST}"),
			(*configs.File).EtcdPassword, "environment variable SNIP_UNSET_FOR_TEST (etcd.auth.password_env) is not set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := mustParse(t, append(lines("instance: a"), c.file...))
			_, err := c.read(f)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestEtcdPasswordWithoutAuthIsEmpty(t *testing.T) {
	f := mustParse(t, lines("instance: a"))
	if pw, err := f.EtcdPassword(); pw != "" || err != nil {
		t.Errorf("EtcdPassword() = %q, %v; want \"\", nil", pw, err)
	}
}

func TestEtcdPasswordFromTheEnvironment(t *testing.T) {
	t.Setenv("SNIP_ETCD_PW", "s3cret")
	f := mustParse(t, lines(
		"etcd:",
		"  endpoints: [https://10.0.0.1:2379]",
		"  auth: {user: snip, password_env: SNIP_ETCD_PW}",
	))
	if pw, err := f.EtcdPassword(); pw != "s3cret" || err != nil {
		t.Errorf("EtcdPassword() = %q, %v", pw, err)
	}
}

func TestASecretPastedInTheWrongPlaceIsNotRepeated(t *testing.T) {
	errs := problems(t, lines(
		"postgres:",
		"  url_env: "+secretURL,
		"etcd:",
		"  endpoints: [https://10.0.0.1:2379]",
		"  auth: {user: snip, password_file: hunter2}",
	))
	if strings.Contains(errs.Error(), "hunter2") {
		t.Errorf("a problem repeats the secret:\n%v", errs)
	}
	if len(errs) != 2 {
		t.Errorf("got %d problems, want 2 (url_env, password_file):%s", len(errs), dump(errs))
	}
}

func TestRedactedNamesWhereSecretsAreButNeverTheSecrets(t *testing.T) {
	t.Setenv("SNIP_JOBS_DATABASE_URL", secretURL)
	t.Setenv("SNIP_ETCD_PW", "s3cret")
	f := mustParse(t, lines(
		"instance: a",
		"etcd:",
		"  endpoints: [https://10.0.0.1:2379]",
		"  auth: {user: snip, password_env: SNIP_ETCD_PW}",
	))
	out := f.Redacted()
	for _, secret := range []string{secretURL, "hunter2", "s3cret"} {
		if strings.Contains(out, secret) {
			t.Errorf("Redacted() contains a secret %q:\n%s", secret, out)
		}
	}
	for _, source := range []string{"url_env: SNIP_JOBS_DATABASE_URL", "password_env: SNIP_ETCD_PW"} {
		if !strings.Contains(out, source) {
			t.Errorf("Redacted() does not name the source %q:\n%s", source, out)
		}
	}
}

func TestRedactedIsAConfigFileMeaningTheSame(t *testing.T) {
	f, err := configs.Load("snip-jobs.example.yaml", anyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	printed := f.Redacted()
	again, err := configs.Parse("printed.yaml", []byte(printed), anyOptions{})
	if err != nil {
		t.Fatalf("Redacted output does not parse:\n%v\n\n%s", err, printed)
	}
	if got := again.Redacted(); got != strings.Replace(printed, "snip-jobs.example.yaml", "printed.yaml", 1) {
		t.Errorf("printing the printed file gives something else:\n%s\n\nfirst print:\n%s", got, printed)
	}
	for i := range f.Jobs {
		// (%+v: an absent list and an empty one mean the same here)
		got, want := configs.Effective(again.Jobs[i].Options), configs.Effective(f.Jobs[i].Options)
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Errorf("job %s options: printed and parsed back %#v, want %#v", f.Jobs[i].Name, got, want)
		}
	}
}

// secretOptions names a secret file of a job's own, as certrenew's key_file,
// and a CA bundle, as its ca_roots_file.
type secretOptions struct {
	KeyFile string `yaml:"key_file"`
	CAFile  string `yaml:"ca_file"`
}

func (o *secretOptions) Files() []configs.OptionFile {
	return []configs.OptionFile{{Key: "key_file", Path: o.KeyFile, Holds: configs.Secret}, {Key: "ca_file", Path: o.CAFile, Holds: configs.Certificates}}
}

type secretTypes struct{}

func (secretTypes) Options(jobType string) (configs.OptionsType, bool) {
	return configs.OptionsOf(func() secretOptions { return secretOptions{} }), jobType == "sealer"
}
func (secretTypes) Names() []string { return []string{"sealer"} }

// Every secret file the config names is checked: readable by its group or by
// others is exposed, whatever the reader; the owner's own bits do not matter;
// a file systemd passed as a credential is its business.
func TestSecretFilesReadableByGroupOrOthersAreExposed(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	url, pw, key, seal := file("url", 0o644), file("pw", 0o640), file("key", 0o400), file("seal", 0o604)
	creds := filepath.Join(dir, "credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	passed := filepath.Join(creds, "database-url")
	if err := os.WriteFile(passed, []byte("secret"), 0o440); err != nil {
		t.Fatal(err)
	}
	f, err := configs.Parse("test.yaml", lines(
		"postgres: {url_file: "+url+"}",
		"etcd:",
		"  endpoints: [https://10.0.0.1:2379]",
		"  tls: {ca: /ca.pem, cert: /c.pem, key: "+key+"}",
		"  auth: {user: snip, password_file: "+pw+"}",
		"jobs:",
		"  - {name: sealer, type: sealer, every: 1h, options: {key_file: "+seal+"}}",
	), secretTypes{})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(f.Files()); got != 6 {
		t.Errorf("Files: %d files, want 6 (4 secrets, etcd's CA and certificate): %+v", got, f.Files())
	}
	var got []string
	for _, p := range f.CheckFiles() {
		if !p.OnlyReadable() {
			t.Errorf("%s: want only its readers reported", p)
		}
		got = append(got, p.String())
	}
	want := []string{
		"postgres.url_file " + url + " is readable by its group and others (mode 0644): chmod go-rwx " + url,
		"etcd.auth.password_file " + pw + " is readable by its group (mode 0640): chmod go-rwx " + pw,
		`job "sealer": options.key_file ` + seal + " is readable by others (mode 0604): chmod go-rwx " + seal,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ExposedSecrets:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	t.Setenv("CREDENTIALS_DIRECTORY", creds)
	f, err = configs.Parse("test.yaml", lines("postgres: {url_file: "+passed+"}"), secretTypes{})
	if err != nil {
		t.Fatal(err)
	}
	if e := f.CheckFiles(); len(e) != 0 {
		t.Errorf("a credential passed by systemd is reported exposed: %v", e)
	}
}

// secretConfig is a config naming url as postgres.url_file.
func secretConfig(t *testing.T, url string) *configs.File {
	t.Helper()
	return mustParse(t, lines("instance: a", "postgres: {url_file: "+url+"}"))
}

// secretFile writes content to a new file name in a temporary directory
// with mode, and returns its path.
func secretFile(t *testing.T, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// A secret file its group or others may write is refused by the reader and
// by the check at start, however its read bits are (--allow-readable-secrets
// allows reading, not writing): anyone could have replaced the secret.
func TestASecretFileOthersCanWriteIsRefused(t *testing.T) {
	for _, c := range []struct {
		mode os.FileMode
		whom string
	}{{0o602, "others"}, {0o620, "its group"}, {0o666, "its group and others"}} {
		url := secretFile(t, "database-url", secretURL, c.mode)
		f := secretConfig(t, url)
		want := fmt.Sprintf("postgres.url_file %s is writable by %s (mode %04o), so anyone could have replaced it: chmod go-rwx %s", url, c.whom, c.mode, url)
		if got, err := f.DatabaseURL(); err == nil || !strings.Contains(err.Error(), want) || got != "" {
			t.Errorf("mode %04o: DatabaseURL() = %q, %v; want an error containing %q", c.mode, got, err, want)
		}
		problems := f.CheckFiles()
		if len(problems) != 1 || problems[0].OnlyReadable() || !strings.HasPrefix(problems[0].String(), want) {
			t.Errorf("mode %04o: CheckFiles() = %v; want one problem starting %q, not allowed by --allow-readable-secrets", c.mode, problems, want)
		}
	}
}

// A secret file that is a named pipe is refused at once, never opened: the
// reader neither waits for a writer (start-up used to hang there, deaf to
// SIGTERM) nor reads what one writes. The test's own writer feeds a reader
// that opens the pipe, so that the old reader returned instead of hanging.
func TestASecretFileThatIsANamedPipeIsRefusedWithoutWaiting(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "database-url")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	written := make(chan error, 1)
	go func() { // waits for a reader to open the pipe
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			_, err = w.WriteString(secretURL)
			w.Close()
		}
		written <- err
	}()
	f := secretConfig(t, fifo)
	got, err := f.DatabaseURL()
	want := "postgres.url_file " + fifo + " is a named pipe, not a regular file: a secret file must be one"
	if err == nil || !strings.Contains(err.Error(), want) || got != "" {
		t.Errorf("DatabaseURL() = %q, %v; want an error containing %q", got, err, want)
	}
	if p := f.CheckFiles(); len(p) != 1 || p[0].Kind != configs.FileNotRegular || !strings.HasPrefix(p[0].String(), want) {
		t.Errorf("CheckFiles() = %v; want the pipe, not a regular file", p)
	}
	// Let the writer go: open the pipe for reading ourselves.
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := <-written; err != nil && !errors.Is(err, syscall.EPIPE) {
		t.Errorf("the test's writer: %v", err)
	}
}

// A secret file larger than a secret is refused unread: a 3 GB sparse file by
// its size, /dev/zero as a device. In a child process whose heap is bounded,
// which the old reader, reading each whole, crossed.
func TestASecretFileLargerThanASecretIsRefusedUnread(t *testing.T) {
	if !inChild(t) {
		return
	}
	sparse := filepath.Join(t.TempDir(), "database-url")
	if err := os.WriteFile(sparse, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sparse, 3<<30); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{sparse, "postgres.url_file " + sparse + " holds 3221225472 bytes; a secret file may hold at most 65536 bytes (it is not read)"},
		{"/dev/zero", "postgres.url_file /dev/zero is a character device, not a regular file: a secret file must be one (it is not read)"},
	} {
		f := secretConfig(t, c.path)
		if got, err := f.DatabaseURL(); err == nil || err.Error() != c.want || got != "" {
			t.Errorf("DatabaseURL() = %q, %v; want the error %q", got, err, c.want)
		}
		if p := f.CheckFiles(); len(p) != 1 || p[0].String() != c.want {
			t.Errorf("CheckFiles() = %v; want %q", p, c.want)
		}
	}
}

// A secret file is read no further than the limit, whatever its size says:
// /proc/kallsyms says it holds 0 bytes and holds megabytes.
func TestASecretFileWhoseSizeLiesIsReadNoFurtherThanTheLimit(t *testing.T) {
	const lying = "/proc/kallsyms"
	if info, err := os.Stat(lying); err != nil || info.Size() != 0 || !info.Mode().IsRegular() {
		t.Fatalf("%s: %v; this test needs Linux's /proc (snip-jobs runs on Linux)", lying, err)
	}
	if all, err := os.ReadFile(lying); err != nil || len(all) <= configs.MaxSecretFileSize {
		t.Fatalf("%s holds %d bytes here (%v), not more than a secret may: the test proves nothing", lying, len(all), err)
	}
	want := "postgres.url_file " + lying + " holds more than that; a secret file may hold at most 65536 bytes (it is not read)"
	if got, err := secretConfig(t, lying).DatabaseURL(); err == nil || err.Error() != want || got != "" {
		t.Errorf("DatabaseURL() = %d bytes, %v; want the error %q", len(got), err, want)
	}
}
