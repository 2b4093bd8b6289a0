package configs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DatabaseURL reads the PostgreSQL URL from postgres.url_env or postgres.url_file,
// trimmed of surrounding white space. Errors name the variable or file, never the
// value.
func (f *File) DatabaseURL() (string, error) {
	return readSecret("postgres.url_file", f.Postgres.URLFile, "postgres.url_env", f.Postgres.URLEnv)
}

// EtcdPassword reads the etcd password from etcd.auth.password_file or
// etcd.auth.password_env, trimmed like DatabaseURL. It returns "" and no error when
// etcd.auth is not configured.
func (f *File) EtcdPassword() (string, error) {
	if f.Etcd.Auth.User == "" {
		return "", nil
	}
	return readSecret("etcd.auth.password_file", f.Etcd.Auth.PasswordFile, "etcd.auth.password_env", f.Etcd.Auth.PasswordEnv)
}

func readSecret(fileKey, file, envKey, env string) (string, error) {
	switch {
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return "", fmt.Errorf("cannot read %s %s: %w", fileKey, file, err)
		}
		s := strings.TrimSpace(string(data))
		if s == "" {
			return "", fmt.Errorf("%s %s is empty", fileKey, file)
		}
		return s, nil
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok {
			return "", fmt.Errorf("environment variable %s (%s) is not set", env, envKey)
		}
		s := strings.TrimSpace(v)
		if s == "" {
			return "", fmt.Errorf("environment variable %s (%s) is empty", env, envKey)
		}
		return s, nil
	}
	return "", fmt.Errorf("neither %s nor %s is set", fileKey, envKey)
}

// SecretFile is a file the config names that holds a secret.
type SecretFile struct {
	Key  string // the setting naming it: "postgres.url_file", "options.key_file"
	Job  string // the job whose options name it; "" outside jobs
	Path string
}

// SecretFiles lists the files the config names that hold secrets:
// postgres.url_file, etcd.auth.password_file, etcd.tls.key,
// kubernetes.token_file, kubernetes.kubeconfig, and the files a
// job's options name, if its type says which (Checked.SecretFiles: option
// key → path).
func (f *File) SecretFiles() []SecretFile {
	var out []SecretFile
	for _, s := range []SecretFile{
		{Key: "postgres.url_file", Path: f.Postgres.URLFile},
		{Key: "etcd.auth.password_file", Path: f.Etcd.Auth.PasswordFile},
		{Key: "etcd.tls.key", Path: f.Etcd.TLS.Key},
		{Key: "kubernetes.token_file", Path: f.Kubernetes.TokenFile},
		{Key: "kubernetes.kubeconfig", Path: f.Kubernetes.Kubeconfig}, // credentials, as kubectl keeps them
	} {
		if s.Path != "" {
			out = append(out, s)
		}
	}
	for _, j := range f.Jobs {
		files := j.Options.checked.SecretFiles
		keys := make([]string, 0, len(files))
		for k := range files {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if files[k] != "" {
				out = append(out, SecretFile{Key: "options." + k, Job: j.Name, Path: files[k]})
			}
		}
	}
	return out
}

// ExposedSecret is a secret file that users other than its owner may read.
type ExposedSecret struct {
	SecretFile
	Mode fs.FileMode
}

func (e ExposedSecret) String() string {
	where := e.Key
	if e.Job != "" {
		where = fmt.Sprintf("job %q: %s", e.Job, e.Key)
	}
	return fmt.Sprintf("%s %s is readable by %s (mode %04o): chmod go-rwx %s", where, e.Path, readers(e.Mode), e.Mode.Perm(), e.Path)
}

func readers(m fs.FileMode) string {
	switch {
	case m&0o040 != 0 && m&0o004 != 0:
		return "its group and others"
	case m&0o040 != 0:
		return "its group"
	}
	return "others"
}

// ExposedSecrets returns the secret files (SecretFiles) that their group or
// others may read, by their mode bits. Files under $CREDENTIALS_DIRECTORY
// are systemd's credentials, readable by the service alone whatever their
// bits say, and are not checked. A file that cannot be examined is left to
// the read that needs it, which reports it.
func (f *File) ExposedSecrets() []ExposedSecret {
	creds := os.Getenv("CREDENTIALS_DIRECTORY")
	var out []ExposedSecret
	for _, s := range f.SecretFiles() {
		if creds != "" && isUnder(s.Path, creds) {
			continue
		}
		info, err := os.Stat(s.Path)
		if err != nil {
			continue
		}
		if info.Mode().Perm()&0o044 != 0 {
			out = append(out, ExposedSecret{SecretFile: s, Mode: info.Mode().Perm()})
		}
	}
	return out
}

func isUnder(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
