package service

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/snip/snip-jobs/configs"
)

// secretConfig is a config whose postgres.url_file is the file made by create
// in a temporary directory.
func secretConfig(t *testing.T, create func(path string) error) (*configs.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "database-url")
	if err := create(path); err != nil {
		t.Fatalf("making %s: %v", path, err)
	}
	f, err := configs.Parse("snip-jobs.yaml", []byte("instance: a\npostgres: {url_file: "+path+"}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f, path
}

func withMode(mode os.FileMode) func(string) error {
	return func(path string) error {
		if err := os.WriteFile(path, []byte("postgres://snip@db/snip"), 0o600); err != nil {
			return err
		}
		return os.Chmod(path, mode)
	}
}

// run refuses to start with a secret file its group or others may read,
// unless allowed, and then warns; it refuses, allowed or not, one they may
// write, one that is not a regular file, and one larger than a secret.
func TestRunRefusesUnsafeSecretFilesWhateverReadingAllows(t *testing.T) {
	for _, c := range []struct {
		name         string
		create       func(string) error
		allowed      bool   // by --allow-readable-secrets
		want, notice string // in the error; in the warning when allowed
	}{
		{"readable", withMode(0o644), true, " is readable by its group and others (mode 0644): chmod go-rwx ", "--allow-readable-secrets"},
		{"writable", withMode(0o602), false, " is writable by others (mode 0602), so anyone could have replaced it: chmod go-rwx ", ""},
		{"named pipe", func(p string) error { return syscall.Mkfifo(p, 0o600) }, false, " is a named pipe, not a regular file", ""},
		{"3 GB", func(p string) error {
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				return err
			}
			return os.Truncate(p, 3<<30)
		}, false, " holds 3221225472 bytes; a secret file may hold at most 65536 bytes", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, path := secretConfig(t, c.create)
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			err := checkFiles(f, false, log)
			want := "postgres.url_file " + path + c.want
			if err == nil || !strings.HasPrefix(err.Error(), "snip-jobs.yaml: the files it names must be regular files no larger than they may be, and secret files must be readable by their owner only") ||
				!strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "--allow-readable-secrets to run") != c.allowed {
				t.Errorf("without --allow-readable-secrets: got %v\nwant an error naming %q (and the flag: %v)", err, want, c.allowed)
			}
			err = checkFiles(f, true, log)
			if c.allowed {
				if err != nil || !strings.Contains(logs.String(), ReadableSecretWarning) || !strings.Contains(logs.String(), want) {
					t.Errorf("with --allow-readable-secrets: got %v and logs %s; want a warning naming %q", err, logs.String(), want)
				}
			} else if err == nil || !strings.Contains(err.Error(), want) || logs.Len() != 0 {
				t.Errorf("with --allow-readable-secrets: got %v and logs %q; want the error naming %q all the same", err, logs.String(), want)
			}
		})
	}
}
