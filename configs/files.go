package configs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/snip/snip-jobs/internal/boundedfile"
)

// FileKind is what a file the config names holds, which says how large it
// may be and which modes are refused.
type FileKind uint8

const (
	// Secret: a password, a URL, keys, a token. At most MaxSecretFileSize;
	// refused when its group or others may write it, reported when they may
	// read it.
	Secret FileKind = iota
	// Kubeconfig: a kubeconfig (kubernetes.kubeconfig), credentials with a
	// cluster's settings: a secret that may hold as much as a config file
	// (MaxFileSize).
	Kubeconfig
	// Certificates: PEM certificates anyone may read, a CA bundle
	// (etcd.tls.ca, kubernetes.ca_file, a job's ca_roots_file) or a client
	// certificate's chain (etcd.tls.cert). At most MaxCertificateFileSize;
	// its modes are not judged.
	Certificates
)

// MaxSecretFileSize is the most a secret file may hold: a secret is a
// password, a URL or a few keys.
const MaxSecretFileSize = 64 << 10

// MaxCertificateFileSize is the most a certificate file may hold: the
// whole Mozilla root store, ~150 roots, is about 220 KB in PEM; a CA bundle
// four times that is not a bundle.
const MaxCertificateFileSize = 1 << 20

// NamedFile is a file the config names.
type NamedFile struct {
	Key   string // the setting naming it: "postgres.url_file", "options.key_file"
	Job   string // the job whose options name it; "" outside jobs
	Path  string
	Holds FileKind
	Pos   Pos // where the setting's value is written (zero: not known)
}

// maxSize is the most n may hold.
func (n NamedFile) maxSize() int64 {
	switch n.Holds {
	case Kubeconfig:
		return MaxFileSize
	case Certificates:
		return MaxCertificateFileSize
	}
	return MaxSecretFileSize
}

// secret reports whether n holds a secret, and the secret files' rules on
// its modes apply.
func (n NamedFile) secret() bool { return n.Holds != Certificates }

// noun names what n is, in messages.
func (n NamedFile) noun() string {
	if n.secret() {
		return "a secret file"
	}
	return "a certificate file"
}

// where is the setting naming n, with its job.
func (n NamedFile) where() string {
	if n.Job != "" {
		return fmt.Sprintf("job %q: %s", n.Job, n.Key)
	}
	return n.Key
}

// ReadFile reads the file n, refusing what FileProblem describes but a
// secret file others may read (that is CheckFiles' business, which
// --allow-readable-secrets may allow): a file that is not a regular one (a
// named pipe or a device is never opened, so it cannot block or feed the
// reader without end), a secret file its group or others may write, and one
// larger than it may be, of which it reads no more than that, whatever its
// size says. Errors name the setting and the file, never the content.
func ReadFile(n NamedFile) ([]byte, error) {
	var last fs.FileInfo
	data, err := boundedfile.Read(n.Path, n.maxSize(), func(info fs.FileInfo) error {
		last = info
		if p := examine(n, info); p.Kind != 0 && p.Kind != FileReadable {
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
	case errors.Is(err, boundedfile.ErrTooLarge):
		return nil, errors.New(FileProblem{NamedFile: n, Kind: FileTooLarge, Mode: last.Mode(), Size: -1}.String())
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return nil, fmt.Errorf("cannot read %s %s: %w", n.where(), n.Path, err)
}

// refused is a problem examine found, in ReadFile's check.
type refused struct{ p FileProblem }

func (r refused) Error() string { return r.p.String() }

// Files lists the files the config names: postgres.url_file,
// etcd.auth.password_file, etcd.tls.ca, .cert and .key,
// kubernetes.token_file, .ca_file and .kubeconfig, and the files a job's
// options name, if its type says which (Checked.Files), each with where it
// is written.
func (f *File) Files() []NamedFile {
	var out []NamedFile
	for _, n := range []NamedFile{
		{Key: "postgres.url_file", Path: f.Postgres.URLFile},
		{Key: "etcd.auth.password_file", Path: f.Etcd.Auth.PasswordFile},
		{Key: "etcd.tls.ca", Path: f.Etcd.TLS.CA, Holds: Certificates},
		{Key: "etcd.tls.cert", Path: f.Etcd.TLS.Cert, Holds: Certificates},
		{Key: "etcd.tls.key", Path: f.Etcd.TLS.Key},
		{Key: "kubernetes.token_file", Path: f.Kubernetes.TokenFile},
		{Key: "kubernetes.ca_file", Path: f.Kubernetes.CAFile, Holds: Certificates},
		{Key: "kubernetes.kubeconfig", Path: f.Kubernetes.Kubeconfig, Holds: Kubeconfig}, // credentials, as kubectl keeps them
	} {
		if n.Path != "" {
			n.Pos = f.SettingPos(n.Key)
			out = append(out, n)
		}
	}
	for _, j := range f.Jobs {
		out = append(out, j.Options.files...)
	}
	return out
}

// SecretPaths are the paths no process a job starts may read: the secret
// files the config names (Files, less the certificates), and systemd's
// credentials directory, where LoadCredential= puts them, when getenv says
// the service has one ($CREDENTIALS_DIRECTORY).
func (f *File) SecretPaths(getenv func(string) string) []string {
	var out []string
	for _, n := range f.Files() {
		if n.secret() {
			out = append(out, n.Path)
		}
	}
	if dir := getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		out = append(out, dir)
	}
	return out
}

// SettingPos is where the value of the setting key (a dotted path naming a
// file, e.g. "kubernetes.kubeconfig") is written, or the file alone when it
// is not known.
func (f *File) SettingPos(key string) Pos {
	if p, ok := f.settings[key]; ok {
		return p
	}
	return Pos{File: f.Path}
}

// FileProblemKind is what is wrong with a file the config names.
type FileProblemKind uint8

const (
	// FileReadable: a secret file its group or others may read. run refuses
	// to start unless --allow-readable-secrets, which makes it a warning.
	FileReadable FileProblemKind = iota + 1
	// FileWritable: a secret file its group or others may write, so anyone
	// could have replaced it. Always refused.
	FileWritable
	// FileNotRegular: a named pipe, a device, a directory or a socket,
	// which would block or feed the reader without end. Always refused.
	FileNotRegular
	// FileTooLarge: larger than its kind may be (MaxSecretFileSize,
	// MaxCertificateFileSize, MaxFileSize). Always refused.
	FileTooLarge
)

// FileProblem is a file the config names that is not safe to read as it is.
type FileProblem struct {
	NamedFile
	Kind FileProblemKind
	Mode fs.FileMode // its type and permissions
	Size int64       // -1: more than it may hold, by reading
}

// OnlyReadable: the problem is one --allow-readable-secrets allows.
func (p FileProblem) OnlyReadable() bool { return p.Kind == FileReadable }

func (p FileProblem) String() string {
	switch p.Kind {
	case FileNotRegular:
		return fmt.Sprintf("%s %s is %s, not a regular file: %s must be one (it is not read)", p.where(), p.Path, fileType(p.Mode), p.noun())
	case FileTooLarge:
		size := "more than that"
		if p.Size >= 0 {
			size = fmt.Sprintf("%d bytes", p.Size)
		}
		return fmt.Sprintf("%s %s holds %s; %s may hold at most %d bytes (it is not read)", p.where(), p.Path, size, p.noun(), p.maxSize())
	case FileWritable:
		return fmt.Sprintf("%s %s is writable by %s (mode %04o), so anyone could have replaced it: chmod go-rwx %s and check what it holds "+
			"(--allow-readable-secrets never allows this)", p.where(), p.Path, whom(p.Mode, 0o020, 0o002), p.Mode.Perm(), p.Path)
	}
	return fmt.Sprintf("%s %s is readable by %s (mode %04o): chmod go-rwx %s", p.where(), p.Path, whom(p.Mode, 0o040, 0o004), p.Mode.Perm(), p.Path)
}

// Line is the problem as validate and run print it: at the setting's
// file:line:col.
func (p FileProblem) Line() string {
	if at := p.Pos.String(); at != "" {
		return at + ": " + p.String()
	}
	return p.String()
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

// examine is what is wrong with n, of which info is the Stat: the most
// serious problem, or none (Kind 0). A secret file others may read is not a
// problem when it is under credentials, systemd's directory for them, which
// makes it readable by the service alone whatever its bits say.
func examine(n NamedFile, info fs.FileInfo) FileProblem {
	p := FileProblem{NamedFile: n, Mode: info.Mode(), Size: info.Size()}
	perm := info.Mode().Perm()
	switch {
	case !info.Mode().IsRegular():
		p.Kind = FileNotRegular
	case n.secret() && perm&0o022 != 0:
		p.Kind = FileWritable
	case info.Size() > n.maxSize():
		p.Kind = FileTooLarge
	case n.secret() && perm&0o044 != 0:
		if creds := os.Getenv("CREDENTIALS_DIRECTORY"); creds == "" || !isUnder(n.Path, creds) {
			p.Kind = FileReadable
		}
	}
	return p
}

// Examine is what is wrong with the file n, by os.Stat (following symbolic
// links): the problem, or Kind 0 when there is none or the file cannot be
// examined (then the read that needs it reports why).
func Examine(n NamedFile) FileProblem {
	info, err := os.Stat(n.Path)
	if err != nil {
		return FileProblem{NamedFile: n}
	}
	return examine(n, info)
}

// CheckFiles examines every file the config names (Files) and returns the
// problems found, one per file: not a regular file, larger than it may be,
// and for a secret file writable by its group or others, or readable by
// them (but under $CREDENTIALS_DIRECTORY: systemd's credentials are readable
// by the service alone whatever their bits say). A file that cannot be
// examined is left to the read that needs it, which reports it.
func (f *File) CheckFiles() []FileProblem {
	var out []FileProblem
	for _, n := range f.Files() {
		if p := Examine(n); p.Kind != 0 {
			out = append(out, p)
		}
	}
	return out
}

func isUnder(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
