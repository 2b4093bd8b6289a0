package configs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/snip/snip-jobs/internal/secretfile"
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
		data, err := ReadSecretFile(SecretFile{Key: fileKey, Path: file})
		if err != nil {
			return "", err
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

// MaxSecretFileSize is the most a secret file may hold: a secret is a
// password, a URL or a few keys. A kubeconfig (kubernetes.kubeconfig), which
// holds a cluster's settings too, may hold as much as a config file
// (MaxFileSize).
const MaxSecretFileSize = 64 << 10

// maxSize is the most s may hold.
func (s SecretFile) maxSize() int64 {
	if s.Key == "kubernetes.kubeconfig" {
		return MaxFileSize
	}
	return MaxSecretFileSize
}

// ReadSecretFile reads the secret file s, refusing what SecretProblem
// describes but a file others may read (that is CheckSecretFiles' business,
// which --allow-readable-secrets may allow): a file that is not a regular one
// (a named pipe or a device is never opened, so it cannot block or feed the
// reader without end), one its group or others may write, and one larger than
// it may be, of which it reads no more than that, whatever its size says.
// Errors name the setting and the file, never the content.
func ReadSecretFile(s SecretFile) ([]byte, error) {
	var last fs.FileInfo
	data, err := secretfile.Read(s.Path, s.maxSize(), func(info fs.FileInfo) error {
		last = info
		if p := examine(s, info); p.Kind != 0 && p.Kind != SecretReadable {
			return refused{p}
		}
		return nil
	})
	var r refused
	switch {
	case err == nil:
		return data, nil
	case errors.As(err, &r):
		return nil, errors.New(r.p.String())
	case errors.Is(err, secretfile.ErrTooLarge):
		return nil, errors.New(SecretProblem{SecretFile: s, Kind: SecretTooLarge, Mode: last.Mode(), Size: -1}.String())
	}
	return nil, s.readError(err)
}

// refused is a problem examine found, in ReadSecretFile's check.
type refused struct{ p SecretProblem }

func (r refused) Error() string { return r.p.String() }

func (s SecretFile) readError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("cannot read %s %s: %w", s.where(), s.Path, err)
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

// where is the setting naming s, with its job.
func (s SecretFile) where() string {
	if s.Job != "" {
		return fmt.Sprintf("job %q: %s", s.Job, s.Key)
	}
	return s.Key
}

// SecretProblemKind is what is wrong with a secret file.
type SecretProblemKind uint8

const (
	// SecretReadable: its group or others may read it. run refuses to start
	// unless --allow-readable-secrets, which makes it a warning.
	SecretReadable SecretProblemKind = iota + 1
	// SecretWritable: its group or others may write it, so anyone could have
	// replaced it. Always refused.
	SecretWritable
	// SecretNotRegular: a named pipe, a device, a directory or a socket,
	// which would block or feed the reader without end. Always refused.
	SecretNotRegular
	// SecretTooLarge: larger than a secret is (MaxSecretFileSize). Always
	// refused.
	SecretTooLarge
)

// SecretProblem is a secret file that is not safe to use as it is.
type SecretProblem struct {
	SecretFile
	Kind SecretProblemKind
	Mode fs.FileMode // its type and permissions
	Size int64       // -1: more than it may hold, by reading
}

// OnlyReadable: the problem is one --allow-readable-secrets allows.
func (p SecretProblem) OnlyReadable() bool { return p.Kind == SecretReadable }

func (p SecretProblem) String() string {
	switch p.Kind {
	case SecretNotRegular:
		return fmt.Sprintf("%s %s is %s, not a regular file: a secret file must be one (it is not read)", p.where(), p.Path, fileType(p.Mode))
	case SecretTooLarge:
		size := "more than that"
		if p.Size >= 0 {
			size = fmt.Sprintf("%d bytes", p.Size)
		}
		return fmt.Sprintf("%s %s holds %s; a secret file may hold at most %d bytes (it is not read)", p.where(), p.Path, size, p.maxSize())
	case SecretWritable:
		return fmt.Sprintf("%s %s is writable by %s (mode %04o), so anyone could have replaced it: chmod go-rwx %s and check what it holds "+
			"(--allow-readable-secrets never allows this)", p.where(), p.Path, whom(p.Mode, 0o020, 0o002), p.Mode.Perm(), p.Path)
	}
	return fmt.Sprintf("%s %s is readable by %s (mode %04o): chmod go-rwx %s", p.where(), p.Path, whom(p.Mode, 0o040, 0o004), p.Mode.Perm(), p.Path)
}

// whom says who the group and other bits of m allow.
func whom(m fs.FileMode, group, other fs.FileMode) string {
	switch {
	case m&group != 0 && m&other != 0:
		return "its group and others"
	case m&group != 0:
		return "its group"
	}
	return "others"
}

func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a plain file (" + m.Type().String() + ")"
}

// examine is what is wrong with s, of which info is the Stat: the most
// serious problem, or none (Kind 0). A file others may read is not a problem
// when it is under credentials, systemd's directory for them, which makes it
// readable by the service alone whatever its bits say.
func examine(s SecretFile, info fs.FileInfo) SecretProblem {
	p := SecretProblem{SecretFile: s, Mode: info.Mode(), Size: info.Size()}
	perm := info.Mode().Perm()
	switch {
	case !info.Mode().IsRegular():
		p.Kind = SecretNotRegular
	case perm&0o022 != 0:
		p.Kind = SecretWritable
	case info.Size() > s.maxSize():
		p.Kind = SecretTooLarge
	case perm&0o044 != 0:
		if creds := os.Getenv("CREDENTIALS_DIRECTORY"); creds == "" || !isUnder(s.Path, creds) {
			p.Kind = SecretReadable
		}
	}
	return p
}

// CheckSecretFiles examines every secret file the config names
// (SecretFiles), following symbolic links, and returns the problems found,
// one per file: not a regular file, writable by its group or others, larger
// than it may be, or readable by its group or others (but under
// $CREDENTIALS_DIRECTORY: systemd's credentials are readable by the service
// alone whatever their bits say). A file that cannot be examined is left to
// the read that needs it, which reports it.
func (f *File) CheckSecretFiles() []SecretProblem {
	var out []SecretProblem
	for _, s := range f.SecretFiles() {
		info, err := os.Stat(s.Path)
		if err != nil {
			continue
		}
		if p := examine(s, info); p.Kind != 0 {
			out = append(out, p)
		}
	}
	return out
}

func isUnder(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
